"""/v1/messages errors in Anthropic's shape, refused fields, and values that pass."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient
from messages_helpers import URL, USER_HI, anthropic_error, body, create

from api.server.app import create_app
from api.server.settings import Settings

KEY = "sk-ant-flint-test"


@pytest.mark.parametrize("prefix", ["/v1", "/inference/v1"])
def test_an_unknown_model_is_a_404_in_anthropics_shape(client, prefix):
    error = anthropic_error(client.post(f"{prefix}/messages", json=body(model="claude-opus-9")), 404)
    assert error["type"] == "not_found_error" and "claude-opus-9" in error["message"]


@pytest.mark.parametrize("raw, field", [
    ({"model": "SmolLM2-135M-Instruct", "messages": USER_HI}, "max_tokens"),
    (body(max_tokens=0), "max_tokens"),
    (body(temperature=1.5), "temperature"),
    (body(messages=[{"role": "tool", "content": "Hi"}]), "messages.0.role"),
    (body(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]), "messages.0.content"),
    (body(stream="yes please"), "stream"),
    (body(frequency_penalty=0.5), "frequency_penalty"),
])
def test_schema_violations_are_400_invalid_request_errors(client, raw, field):
    error = anthropic_error(client.post(URL, json=raw), 400)
    assert error["type"] == "invalid_request_error" and error["message"].startswith(f"{field}"), error


@pytest.mark.parametrize("block, field", [
    ({"type": "thinking", "thinking": "Hmm."}, "signature"),
    ({"type": "thinking", "thinking": "Hmm.", "signature": 5}, "signature"),
    ({"type": "thinking", "signature": "sig"}, "thinking"),
])
def test_a_thinking_blocks_error_names_its_own_field(client, block, field):
    # pydantic locates the error under the union tag `thinking`, which is also a key of the block.
    raw = body(messages=[*USER_HI, {"role": "assistant", "content": [block]}])
    message = anthropic_error(client.post(URL, json=raw), 400)["message"]
    assert f"messages.1.content.0.{field}: " in message, message


def test_malformed_json_is_an_invalid_request_error(client):
    response = client.post(URL, content=b'{"model": ', headers={"content-type": "application/json"})
    assert "JSON" in anthropic_error(response, 400)["message"]


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Notes."}}
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"}
THINKING = {"type": "thinking", "thinking": "Hmm.", "signature": "sig"}
TOOL = {"name": "add", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}


def user_blocks(*blocks) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "Look:"}, *blocks]}]


@pytest.mark.parametrize("fields, param, why", [
    ({"tools": [{**TOOL, "defer_loading": True}]}, "tools.[0].defer_loading", "tool search"),
    ({"tool_choice": {"type": "any"}}, "tool_choice", "no tools"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "sub"}}, "tool_choice.name", "not among the tools"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking", "thinking"),
    ({"messages": user_blocks(IMAGE)}, "messages.[0].content.[1].source", "image"),
    ({"messages": user_blocks(DOCUMENT)}, "messages.[0].content.[1].source", "document"),
    ({"messages": [*USER_HI, {"role": "assistant", "content": [{**TOOL_USE, "toolset_name": "calc"}]}]},
     "messages.[1].content.[0].toolset_name", "toolsets"),
    ({"messages": user_blocks({**TOOL_RESULT, "content": [{"type": "tool_reference", "tool_name": "add"}]})},
     "messages.[0].content.[1].content.[0].tool_name", "tool_reference"),
    ({"messages": [*USER_HI, {"role": "assistant", "content": [THINKING]}]}, "messages.[1].content.[0].signature",
     "thinking"),
    ({"system": [{"type": "text", "text": "Hi", "citations": [{"type": "char_location"}]}]},
     "system.[0].citations", "citations"),
    ({"system": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
     "system.[0].cache_control.ttl", "hour"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "string", "pattern": "(a"}}}},
     "output_config.format.schema", "cannot be used to constrain the output"),
    ({"raw_output": True}, "raw_output", "raw_output"),
])
def test_refused_fields_are_400s_naming_them(client, fields, param, why):
    error = anthropic_error(client.post(URL, json=body(**fields)), 400)
    assert error["type"] == "invalid_request_error"
    assert f"`{param}`" in error["message"] and why in error["message"], error


def test_values_that_ask_for_nothing_are_accepted(client):
    reply = create(client, tools=[], tool_choice={"type": "none"}, thinking={"type": "disabled"},
                   service_tier="standard_only", raw_output=False, output_config={})
    assert reply["usage"]["service_tier"] == "standard"
    assert create(client, tool_choice={"type": "auto"}, service_tier="auto")["type"] == "message"


def test_an_empty_conversation_is_refused(client):
    error = anthropic_error(client.post(URL, json=body(messages=[])), 400)
    assert "messages" in error["message"]


def test_a_full_queue_is_a_429_rate_limit_error(client, monkeypatch):
    server = client.app.state.server
    full = server.settings.engine.max_num_seqs + server.settings.max_waiting  # admitted already
    monkeypatch.setattr(server, "num_admitted_choices", full)
    response = client.post(URL, json=body())
    assert anthropic_error(response, 429)["type"] == "rate_limit_error"
    assert response.headers["retry-after"] == "1"


def test_api_keys_come_in_x_api_key_and_errors_keep_anthropics_shape():
    # No lifespan: the engine never loads, so a request with the right key gets as far as
    # the serving check (503), one with a wrong or no key stops at the key check (401).
    client = TestClient(app=create_app(Settings(api_key=KEY)))
    for headers in ({}, {"x-api-key": "wrong"}, {"Authorization": "Bearer wrong"}):
        error = anthropic_error(client.post(URL, json=body(), headers=headers), 401)
        assert error["type"] == "authentication_error"
    starting = client.post(URL, json=body(), headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert anthropic_error(starting, 503)["type"] == "overloaded_error"
    assert int(starting.headers["retry-after"]) > 0
    # The shape is the route's: the OpenAI routes of the same app keep OpenAI's.
    openai_error = client.get("/v1/models", headers={"x-api-key": "wrong"}).json()
    assert set(openai_error) == {"error"} and openai_error["error"]["code"] == "invalid_api_key"


def test_a_body_over_the_limit_is_request_too_large(client):
    limit = client.app.state.server.settings.max_body_bytes
    response = client.post(URL, json=body(system="x" * limit))
    assert anthropic_error(response, 413)["type"] == "request_too_large"
