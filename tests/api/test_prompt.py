"""api/core/prompt.py without an engine: roles, content parts and template refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import tokenizers
from tokenizers import models

from api.core.errors import ApiError
from api.core.prompt import encode_chat, message_text, render, template_messages, template_role
from api.server.settings import Settings
from engine.text.tokenizer import Tokenizer

ROLE_AWARE = "{% if m.role == 'developer' %}{% elif m.role == \"function\" %}{% endif %}"


@pytest.mark.parametrize("role, plain, aware", [
    ("developer", "system", "developer"),
    ("function", "tool", "function"),
    ("system", "system", "system"),
    ("user", "user", "user"),
    ("assistant", "assistant", "assistant"),
    ("tool", "tool", "tool"),
])
def test_new_roles_fall_back_unless_the_template_names_them(role, plain, aware):
    assert template_role(role, "{{ message.role }}") == plain
    assert template_role(role, ROLE_AWARE) == aware


def test_parts_join_with_newlines_and_refusals_are_text():
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert message_text(parts, 0) == "a\nb"
    refusal_part = {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
    assert message_text(refusal_part, 0) == "No."
    assert message_text({"role": "assistant", "content": None, "refusal": "Nope"}, 0) == "Nope"
    assert message_text({"role": "function", "content": None, "name": "f"}, 0) == ""


def test_names_and_tool_call_ids_stay_on_the_message():
    messages = [{"role": "tool", "content": "42", "tool_call_id": "call_1"},
                {"role": "user", "content": "hi", "name": "ann"}]
    assert template_messages(messages, "") == [
        {"role": "tool", "content": "42", "tool_call_id": "call_1"},
        {"role": "user", "content": "hi", "name": "ann"},
    ]


@pytest.mark.parametrize("part, kind", [
    ({"type": "image_url", "image_url": {"url": "https://x/y.png"}}, "image"),
    ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}, "audio"),
    ({"type": "file", "file": {"file_id": "f"}}, "file"),
])
def test_non_text_parts_name_their_type(part, kind):
    message = {"role": "user", "content": [{"type": "text", "text": "look"}, part]}
    with pytest.raises(ApiError) as refused:
        template_messages([message], "")
    error = refused.value.body.error
    assert refused.value.status_code == 400
    assert error.param == f"messages.[0].content.[1].{part['type']}"
    assert part["type"] in error.message and kind in error.message


def word_tokenizer(template: str | None) -> Tokenizer:
    vocab = {"[UNK]": 0, "hi": 1, "there": 2}
    inner = tokenizers.Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return Tokenizer(inner, chat_template=template)


def test_prompt_ids_are_the_rendered_template_without_added_specials():
    tokenizer = word_tokenizer("{% for m in messages %}{{ m.content }} {% endfor %}there")
    server = SimpleNamespace(tokenizer=tokenizer, settings=Settings())
    assert encode_chat(server, [{"role": "user", "content": "hi"}], "", "messages") == [1, 2]


@pytest.mark.parametrize("template, reason", [
    ("{{ raise_exception('system messages are not supported') }}", "system messages are not supported"),
    (None, "no chat template"),
])
def test_a_template_refusal_is_a_400_on_messages(template, reason):
    with pytest.raises(ApiError) as refused:
        render(word_tokenizer(template), [{"role": "system", "content": "hi"}], "messages")
    assert refused.value.status_code == 400
    assert refused.value.body.error.param == "messages" and reason in refused.value.body.error.message
