"""Stored chat completions over HTTP, on SQLite and on PostgreSQL: `store: true` keeps the
completion (streamed ones too), and the list, retrieve, update, delete and messages routes
serve it. Each test tags its completions with metadata of its own, so the tests share one
app (and store) per backend."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from litestar.testing import TestClient
from postgres_server import BACKENDS, drop_tables

from api.chat import fields as chat_fields
from api.core.registry import ModelFields, Refused, Registry
from api.server.settings import Settings
from generated.openai_chat_completions import UpdateChatCompletionRequest

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module", params=BACKENDS)
def client(request, tiny_app_factory):
    """On SQLite, the session's shared app (its store is a SQLite file in the tests' data
    directory); on PostgreSQL an app of its own, on the test database."""
    if request.param == "sqlite":
        yield request.getfixturevalue("shared_tiny_client")
        return
    url = request.getfixturevalue("postgres_url")
    asyncio.run(drop_tables(url))  # what other modules left in the session's database
    settings = Settings(engine=ONE_BUCKET_ENGINE, store_url=url)
    with TestClient(app=tiny_app_factory(settings)) as client:
        wait_until_serving(client)
        yield client


def tag() -> dict[str, str]:
    return {"test": uuid.uuid4().hex}


def create(client: TestClient, prefix: str = "/v1", **fields) -> dict:
    body = {"model": "SmolLM2-135M-Instruct", "messages": MESSAGES, "max_completion_tokens": 3, "store": True,
            **fields}
    response = client.post(f"{prefix}/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def model_id(client: TestClient) -> str:
    return client.get("/v1/models").json()["data"][0]["id"]


def assert_not_found(response) -> None:
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "completion_id"


def test_stored_completion_is_retrieved_as_returned(client):
    metadata = tag()
    completion = create(client, model=model_id(client), metadata=metadata)
    for prefix in ("/v1", "/inference/v1"):
        stored = client.get(f"{prefix}/chat/completions/{completion['id']}")
        assert stored.status_code == 200
        assert stored.json() == {**completion, "metadata": metadata}


def test_streamed_completion_is_stored_assembled_from_its_chunks(client):
    with client.stream("POST", "/v1/chat/completions", json={
            "model": model_id(client), "messages": MESSAGES, "max_completion_tokens": 4, "store": True,
            "stream": True, "stream_options": {"include_usage": True}}) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    stored = client.get(f"/v1/chat/completions/{chunks[0]['id']}").json()
    choice = stored["choices"][0]
    assert choice["message"]["content"] == "".join(c["choices"][0]["delta"].get("content") or ""
                                                  for c in chunks if c["choices"])
    assert choice["finish_reason"] == next(c["choices"][0]["finish_reason"] for c in chunks
                                           if c["choices"] and c["choices"][0]["finish_reason"])
    assert stored["usage"] == chunks[-1]["usage"]
    assert (stored["created"], stored["model"]) == (chunks[0]["created"], chunks[0]["model"])


def test_without_store_nothing_is_kept(client):
    completion = create(client, store=False)
    assert_not_found(client.get(f"/v1/chat/completions/{completion['id']}"))
    assert_not_found(client.get("/v1/chat/completions/chatcmpl-unknown"))


def test_list_filters_by_metadata_and_pages_in_both_orders(client):
    metadata = tag()
    created = [create(client, metadata={**metadata, "i": str(i)})["id"] for i in range(3)]
    create(client, metadata=tag())  # another test's: not listed
    first = client.get("/v1/chat/completions", params={"metadata[test]": metadata["test"], "limit": 2}).json()
    assert [c["id"] for c in first["data"]] == created[:2] and first["has_more"]
    assert (first["object"], first["first_id"], first["last_id"]) == ("list", created[0], created[1])
    rest = client.get("/v1/chat/completions", params={"metadata[test]": metadata["test"],
                                                      "after": first["last_id"]}).json()
    assert [c["id"] for c in rest["data"]] == created[2:] and not rest["has_more"]
    newest = client.get("/v1/chat/completions", params={"metadata[test]": metadata["test"], "order": "desc"})
    assert [c["id"] for c in newest.json()["data"]] == created[::-1]
    both = client.get("/v1/chat/completions", params={"metadata[test]": metadata["test"], "metadata[i]": "1",
                                                      "model": model_id(client)})
    assert [c["id"] for c in both.json()["data"]] == [created[1]]
    other_model = client.get("/v1/chat/completions", params={"metadata[test]": metadata["test"], "model": "x"})
    assert other_model.json()["data"] == []


def test_update_replaces_metadata_and_null_clears_it(client):
    completion = create(client, metadata=tag())
    path = f"/v1/chat/completions/{completion['id']}"
    new = tag()
    updated = client.post(path, json={"metadata": new})
    assert updated.status_code == 200 and updated.json() == {**completion, "metadata": new}
    listed = client.get("/v1/chat/completions", params={"metadata[test]": new["test"]}).json()["data"]
    assert [c["id"] for c in listed] == [completion["id"]]
    assert client.post(path, json={"metadata": None}).json()["metadata"] is None
    assert client.get(path).json()["metadata"] is None
    assert_not_found(client.post("/v1/chat/completions/chatcmpl-unknown", json={"metadata": {}}))


def test_update_bodies_that_break_the_schema_are_400_naming_the_field(client):
    path = f"/v1/chat/completions/{create(client)['id']}"
    missing = client.post(path, json={})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "metadata"
    too_long = client.post(path, json={"metadata": {"k": "v" * 513}})
    assert too_long.status_code == 400 and too_long.json()["error"]["param"].startswith("metadata")
    unknown = client.post(path, json={"metadata": {}, "model": "x"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "model"


def test_update_bodies_pass_the_field_registry(client, monkeypatch):
    """The update route refuses what the registry refuses (here, a refusal put in for the test)."""
    path = f"/v1/chat/completions/{create(client)['id']}"
    refusing = Registry([ModelFields(UpdateChatCompletionRequest, {"metadata": Refused("not today")})])
    monkeypatch.setattr(chat_fields, "REGISTRY", refusing)
    refused = client.post(path, json={"metadata": {"k": "v"}})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "metadata"
    assert "not today" in refused.json()["error"]["message"]


def test_delete_removes_the_completion(client):
    completion = create(client)
    path = f"/v1/chat/completions/{completion['id']}"
    deleted = client.delete(path)
    assert deleted.status_code == 200
    assert deleted.json() == {"id": completion["id"], "object": "chat.completion.deleted", "deleted": True}
    assert_not_found(client.get(path))
    assert_not_found(client.delete(path))


def test_messages_list_pages_the_request_messages(client):
    messages = [*MESSAGES, {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": [{"type": "text", "text": "Tell "}, {"type": "text", "text": "me"}],
                 "name": "ann"}]
    completion_id = create(client, messages=messages)["id"]
    path = f"/v1/chat/completions/{completion_id}/messages"
    first = client.get(path, params={"limit": 3}).json()
    assert [m["role"] for m in first["data"]] == ["system", "user", "assistant"] and first["has_more"]
    assert [m["content"] for m in first["data"]] == ["Be brief.", "Hello", "Hi."]
    rest = client.get(path, params={"after": first["last_id"]}).json()
    assert not rest["has_more"] and len(rest["data"]) == 1
    last = rest["data"][0]
    assert (last["content"], last["name"]) == ("Tell me", "ann")
    assert last["content_parts"] == messages[3]["content"]
    backwards = client.get(path, params={"order": "desc"}).json()["data"]
    assert [m["id"] for m in backwards] == [m["id"] for m in first["data"] + rest["data"]][::-1]
    assert_not_found(client.get("/v1/chat/completions/chatcmpl-unknown/messages"))


def test_list_parameters_are_checked(client):
    limit = client.get("/v1/chat/completions", params={"limit": 0})
    assert limit.status_code == 400 and limit.json()["error"]["param"] == "limit"
    for query, param in (({"order": "sideways"}, "order"), ({"colour": "red"}, "colour")):
        refused = client.get("/v1/chat/completions", params=query)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param
    after = client.get("/v1/chat/completions", params={"after": "chatcmpl-unknown"})
    assert after.status_code == 400 and after.json()["error"]["param"] == "after"
