"""POST /v1/messages/count_tokens on the tiny-model app: the count is the prompt that
POST /v1/messages generates from for the same body, refusals are a message's, and every
error under /v1/messages, routed or not, is in Anthropic's shape.

Expectations come from outside the code under test: the engine requests a message makes,
the usage it reports, and the tokenizer's own rendering of the conversation."""

from __future__ import annotations

import pytest

from api_helpers import rendered_ids
from messages_helpers import MODEL_ID, USER_HI, anthropic_error, body

COUNT = "/v1/messages/count_tokens"
SYSTEM = "You count the grains of sand on a beach."
CONVERSATION = [{"role": "user", "content": "Hello."},
                {"role": "assistant", "content": [{"type": "text", "text": "Hi there."}]},
                {"role": "user", "content": [{"type": "text", "text": "How many"}, {"type": "text", "text": "grains?"}]}]


def count(client, **fields) -> int:
    response = client.post(COUNT, json={"model": MODEL_ID, "messages": USER_HI, **fields})
    assert response.status_code == 200, response.text
    payload = response.json()
    assert set(payload) == {"input_tokens"}
    return payload["input_tokens"]


@pytest.mark.parametrize("fields", [
    {},
    {"system": SYSTEM},
    {"system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}], "messages": CONVERSATION},
    {"messages": [*CONVERSATION, {"role": "assistant", "content": "Roughly"}]},  # a prefill
    {"messages": [{"role": "system", "content": SYSTEM}, *CONVERSATION]},  # a system turn
], ids=["one-message", "system", "system-blocks-and-turns", "prefill", "system-turn"])
def test_the_count_is_the_prompt_a_message_generates_from(client, engine_requests, fields):
    counted = count(client, **fields)
    reply = client.post("/v1/messages", json=body(**fields))
    assert reply.status_code == 200, reply.text
    [request] = engine_requests
    assert counted == len(request.prompt_token_ids)
    usage = reply.json()["usage"]  # the prompt's tokens, split into those the prefix cache held and the rest
    assert counted == usage["input_tokens"] + usage["cache_read_input_tokens"]


def test_the_count_matches_the_tokenizers_own_rendering(client, smollm2_tokenizer):
    expected = rendered_ids(smollm2_tokenizer, [{"role": "system", "content": SYSTEM}, *USER_HI])
    assert count(client, system=SYSTEM) == len(expected)
    assert count(client) == len(rendered_ids(smollm2_tokenizer, USER_HI))


def test_the_inference_alias_counts_too(client):
    response = client.post("/inference/v1/messages/count_tokens", json={"model": MODEL_ID, "messages": USER_HI})
    assert response.status_code == 200 and response.json() == {"input_tokens": count(client)}


@pytest.mark.parametrize("raw, field", [
    ({"model": MODEL_ID}, "messages"),
    ({"messages": USER_HI}, "model"),
    ({"model": MODEL_ID, "messages": USER_HI, "max_tokens": 5}, "max_tokens"),  # not a count's field
    ({"model": MODEL_ID, "messages": [{"role": "user", "content": 7}]}, "messages.0.content"),
    ({"model": MODEL_ID, "messages": USER_HI, "speed": "ludicrous"}, "speed"),
])
def test_schema_violations_are_400s_naming_the_field(client, raw, field):
    error = anthropic_error(client.post(COUNT, json=raw), 400)
    assert error["type"] == "invalid_request_error" and error["message"].startswith(field), error


@pytest.mark.parametrize("fields, param", [
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking"),
    ({"speed": "fast"}, "speed"),
    ({"output_config": {"effort": "low"}}, "output_config.effort"),
    ({"cache_control": {"type": "ephemeral", "ttl": "1h"}}, "cache_control.ttl"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]}, "messages.[0].content.[0].source"),
])
def test_refused_fields_are_refused_as_a_message_refuses_them(client, fields, param):
    counted = anthropic_error(client.post(COUNT, json={"model": MODEL_ID, "messages": USER_HI, **fields}), 400)
    created = anthropic_error(client.post("/v1/messages", json=body(**fields)), 400)
    assert f"`{param}`" in counted["message"] and counted == created


def test_a_prompt_a_message_refuses_is_refused_alike(client):
    prefill = [*USER_HI, {"role": "assistant", "content": "Hi "}]  # a prefill ending in whitespace
    counted = anthropic_error(client.post(COUNT, json={"model": MODEL_ID, "messages": prefill}), 400)
    assert counted == anthropic_error(client.post("/v1/messages", json=body(messages=prefill)), 400)
    assert "whitespace" in counted["message"]


def test_an_unknown_model_is_a_404_in_anthropics_shape(client):
    error = anthropic_error(client.post(COUNT, json={"model": "claude-opus-9", "messages": USER_HI}), 404)
    assert error["type"] == "not_found_error" and "claude-opus-9" in error["message"]


@pytest.mark.parametrize("prefix", ["/v1", "/inference/v1"])
@pytest.mark.parametrize("method, path, status, error_type", [
    ("POST", "/messages/nope", 404, "not_found_error"),
    ("GET", "/messages/count_tokens", 405, "invalid_request_error"),
    ("GET", "/messages", 405, "invalid_request_error"),
    ("DELETE", "/messages/msg_1", 404, "not_found_error"),
])
def test_unrouted_errors_under_messages_are_in_anthropics_shape(client, prefix, method, path, status, error_type):
    error = anthropic_error(client.request(method, prefix + path, json={}), status)
    assert error["type"] == error_type and error["message"]


@pytest.mark.parametrize("path", ["/v1/nope", "/v1/messagesx", "/v1/chat/nope"])
def test_other_unknown_paths_keep_openais_shape(client, path):
    response = client.post(path, json={})
    assert response.status_code == 404
    assert set(response.json()) == {"error"} and response.json()["error"]["type"] == "not_found_error"
