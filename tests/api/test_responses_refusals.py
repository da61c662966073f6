"""What POST /v1/responses refuses: 400 naming the field, in OpenAI's error shape, for schema
violations and for
what this server cannot honour, 404 for an unknown model or stored response."""

from __future__ import annotations

import pytest

from responses_helpers import URL, body, create, refusal


def test_unknown_model_is_404(client):
    error = refusal(client, 404, model="gpt-nothing")["error"]
    assert error["param"] == "model" and error["code"] == "model_not_found"


def test_unknown_previous_response_is_404(client):
    error = refusal(client, 404, previous_response_id="resp_nothing")["error"]
    assert error["param"] == "previous_response_id" and "resp_nothing" in error["message"]


@pytest.mark.parametrize("fields, param", [
    ({"unknown_knob": 1}, "unknown_knob"),
    ({"temperature": 3}, "temperature"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi", "extra": 1}]}]}, "input"),
])
def test_schema_violations_are_400_naming_the_field(client, fields, param):
    error = refusal(client, 400, **fields)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"].split(".")[0] == param and error["param"] in error["message"]


def test_a_body_without_input_is_400_naming_it(client):
    response = client.post(URL, json={"model": body()["model"]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": "required"}, "tool_choice"),  # with no tools to call
    ({"background": True}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input.[0]"),  # no answer follows it
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.[0].id"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"stream_options": {"include_obfuscation": False}}, "stream_options"),
])
def test_unsupported_fields_are_refused_by_name(client, fields, param):
    error = refusal(client, 400, **fields)["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_image_and_file_parts_are_refused(client):
    image = {"type": "input_image", "image_url": "https://example.org/cat.png"}
    error = refusal(client, 400, input=[{"role": "user", "content": [image]}])["error"]
    assert error["param"] == "input.[0].content.[0].image_url" and "text-only" in error["message"]
    bare = refusal(client, 400, input=[{"role": "user", "content": [{"type": "input_file"}]}])["error"]
    assert bare["param"] == "input.[0].content.[0]" and "file" in bare["message"]


def test_values_that_change_nothing_are_accepted(client):
    response = create(client, tools=[], tool_choice="auto", background=False, truncation="disabled",
                      service_tier="auto", text={"format": {"type": "text"}}, reasoning={"effort": "none"},
                      parallel_tool_calls=False, max_tool_calls=2)
    assert response["status"] in ("completed", "incomplete")


def test_a_conversation_longer_than_the_context_is_400(client):
    error = refusal(client, 400, input="word " * 400)["error"]
    assert error["param"] == "input" and error["code"] == "context_length_exceeded"
