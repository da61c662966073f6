"""Every dialect reads its body off the event loop: a conversation, an input list or a tool
list as long as the body limit allows takes seconds to copy, convert and check, and the
loop serves every other client (and /health) meanwhile. Each test watches the functions
that walk the whole body and fails if one runs on the loop (tests/e2e/test_event_loop.py
measures the stall itself, against a live server)."""

from __future__ import annotations

import logging

import pytest

from api.chat import plan as chat_plan
from api.messages import plan as messages_plan
from api.responses import plan as responses_plan
from chat_helpers import MODEL_ID
from loop_helpers import watch_where_called

CONVERSATION = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize("owner, names, path, body", [
    (chat_plan, ("prompt_messages", "chat_tools"), "/v1/chat/completions",
     {"messages": CONVERSATION, "max_tokens": 2}),
    (responses_plan, ("request_items", "chat_messages", "response_tools"), "/v1/responses",
     {"input": CONVERSATION, "max_output_tokens": 2}),
    (messages_plan, ("template_conversation", "messages_tools"), "/v1/messages",
     {"messages": CONVERSATION, "max_tokens": 2}),
    (messages_plan, ("template_conversation", "messages_tools"), "/v1/messages/count_tokens",
     {"messages": CONVERSATION}),
], ids=["chat", "responses", "messages", "count_tokens"])
def test_the_body_is_read_in_a_worker_thread(client, monkeypatch, owner, names, path, body):
    calls = {name: watch_where_called(monkeypatch, owner, name) for name in names}
    response = client.post(path, json={"model": MODEL_ID, **body})
    assert response.status_code == 200, response.text
    assert calls == {name: [False] for name in names}, "True: that step ran on the event loop"



@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": CONVERSATION, "max_tokens": 2}),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
    ("/v1/responses", {"input": CONVERSATION, "max_output_tokens": 2}),
], ids=["chat", "completions", "responses"])
def test_a_caller_field_as_long_as_the_body_is_logged_cut(client, caplog, path, body):
    """`user` is logged as it comes, on the loop: written whole, megabytes of it would hold
    the loop for as long as the log takes them."""
    caplog.set_level(logging.INFO, logger="flint")
    response = client.post(path, json={"model": MODEL_ID, **body, "user": "u" * 100_000})
    assert response.status_code == 200, response.text
    [logged] = [record.getMessage() for record in caplog.records if "u" * 100 in record.getMessage()]
    assert len(logged) < 2_000
