"""Stored chat completions on the live SmolLM2 server, driven by the `openai` SDK: create
with `store=True`, then list (metadata filter, pagination), retrieve, update, list the
messages and delete."""

from __future__ import annotations

import uuid

import openai
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name a colour of the sky."}]


def create_stored(sdk: openai.OpenAI, metadata: dict[str, str]):
    return sdk.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_completion_tokens=4,
                                       temperature=0, store=True, metadata=metadata)


def test_stored_completions_through_the_sdk(sdk):
    run = uuid.uuid4().hex
    created = [create_stored(sdk, {"run": run, "i": str(i)}) for i in range(3)]
    ids = [completion.id for completion in created]

    first_page = sdk.chat.completions.list(metadata={"run": run}, limit=2)
    assert [c.id for c in first_page.data] == ids[:2] and first_page.has_more
    assert [c.id for c in sdk.chat.completions.list(metadata={"run": run}, limit=2)] == ids  # auto-paginated
    newest = sdk.chat.completions.list(metadata={"run": run}, order="desc", model=MODEL_ID)
    assert [c.id for c in newest.data] == ids[::-1]

    retrieved = sdk.chat.completions.retrieve(ids[1])
    assert retrieved.choices[0].message.content == created[1].choices[0].message.content
    assert retrieved.usage == created[1].usage and retrieved.metadata == {"run": run, "i": "1"}

    updated = sdk.chat.completions.update(ids[1], metadata={"run": run, "i": "changed"})
    assert updated.metadata == {"run": run, "i": "changed"}
    assert [c.id for c in sdk.chat.completions.list(metadata={"run": run, "i": "changed"})] == [ids[1]]

    messages = sdk.chat.completions.messages.list(ids[0], limit=1)
    assert [(m.role, m.content) for m in messages.data] == [("system", MESSAGES[0]["content"])]
    assert [(m.role, m.content) for m in sdk.chat.completions.messages.list(ids[0], limit=1)] == [
        (m["role"], m["content"]) for m in MESSAGES]

    deleted = sdk.chat.completions.delete(ids[0])
    assert (deleted.id, deleted.deleted) == (ids[0], True)
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.retrieve(ids[0])
    assert [c.id for c in sdk.chat.completions.list(metadata={"run": run})] == ids[1:]
