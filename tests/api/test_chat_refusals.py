"""Malformed, out-of-range and not-yet-supported chat bodies: each gets its documented 4xx
naming the field, and the server goes on serving."""

from __future__ import annotations

import pytest

from chat_helpers import MODEL_ID, URL, USER_HI, body, chat

LONG = " ".join(["word"] * 300)  # over the tiny engine's 256-token window
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
FILE = {"type": "file", "file": {"file_id": "file-1"}}
TOOL = {"type": "function", "function": {"name": "add"}}


def user_parts(*parts) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, *parts]}]


def without(field: str) -> dict:
    return {k: v for k, v in body().items() if k != field}


# (body, where the schema error points: pydantic's location, which the 400's message and `param` name)
SCHEMA_ERRORS = [
    ({**body(), "messages": "hi"}, ["body", "messages"]),
    (without("messages"), ["body", "messages"]),
    ({**body(), "messages": []}, ["body", "messages"]),
    ({**body(), "messages": [{"role": "robot", "content": "beep"}]}, ["body", "messages", 0]),
    ({**body(), "messages": [{"role": "user"}]}, ["body", "messages", 0, "content"]),
    ({**body(), "messages": [{"role": "user", "content": "hi", "mood": "happy"}]},
     ["body", "messages", 0, "mood"]),
    ({**body(), "n": 0}, ["body", "n"]),
    ({**body(), "n": 129}, ["body", "n"]),
    ({**body(), "n": "two"}, ["body", "n"]),
    ({**body(), "temperature": 3}, ["body", "temperature"]),
    ({**body(), "temperature": "hot"}, ["body", "temperature"]),
    ({**body(), "top_p": 1.5}, ["body", "top_p"]),
    ({**body(), "presence_penalty": -3}, ["body", "presence_penalty"]),
    ({**body(), "stop": ["a", "b", "c", "d", "e"]}, ["body", "stop"]),
    ({**body(), "max_completion_tokens": 0}, ["body", "max_completion_tokens"]),
    ({**body(), "top_logprobs": 21, "logprobs": True}, ["body", "top_logprobs"]),
    ({**body(), "logit_bias": {"5": 101}}, ["body", "logit_bias"]),
    ({**body(), "stream_options": {"include_usage": True, "extra": 1}, "stream": True},
     ["body", "stream_options", "extra"]),
    ({**body(), "best_of": 2}, ["body", "best_of"]),
    ({**body(), "top_k": 101}, ["body", "top_k"]),
    ({**body(), "context_length_exceeded_behavior": "shrug"}, ["body", "context_length_exceeded_behavior"]),
]

REFUSALS = [
    (body(max_tokens=5), 400, "max_completion_tokens"),
    (body(messages=user_parts(IMAGE)), 400, "messages.[0].content.[1].image_url"),
    (body(messages=user_parts(AUDIO)), 400, "messages.[0].content.[1].input_audio"),
    (body(messages=user_parts(FILE)), 400, "messages.[0].content.[1].file"),
    (body(model="gpt-17"), 404, "model"),
    (body(tools=[{"type": "function", "function": {"name": "bad name"}}]), 400, "tools.[0].function.name"),
    (body(tool_choice="required"), 400, "tool_choice"),
    (body(functions=[{"name": "add"}], tools=[TOOL]), 400, "functions"),
    (body(function_call={"name": "add"}), 400, "function_call"),
    (body(messages=[*USER_HI, {"role": "assistant", "audio": {"id": "a"}}]), 400, "messages.[1].audio"),
    (body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}),
     400, "response_format.json_schema.schema"),
    (body(reasoning_effort="high"), 400, "reasoning_effort"),
    (body(verbosity="high"), 400, "verbosity"),
    (body(modalities=["text", "audio"]), 400, "modalities"),
    (body(audio={"voice": "alloy", "format": "wav"}), 400, "audio"),
    (body(web_search_options={}), 400, "web_search_options"),
    (body(prompt_cache_retention="24h"), 400, "prompt_cache_retention"),
    (body(stream_options={"include_usage": True}), 400, "stream_options"),
    (body(top_logprobs=2), 400, "top_logprobs"),
    (body(seed=-1), 400, "seed"),
    (body(stop=["", "x"]), 400, "stop"),
    (body(logit_bias={"999999": 5}), 400, "logit_bias"),
    (body(logit_bias={"hello": 5}), 400, "logit_bias"),
    (body(messages=[{"role": "user", "content": LONG}]), 400, "messages"),
    # Fireworks chat fields OpenAI lacks (api/chat/body.py).
    (body(echo=True), 400, "echo"),
    (body(thinking={"type": "enabled"}), 400, "thinking"),
    (body(prompt_truncate_len=100), 400, "prompt_truncate_len"),
    (body(messages=user_parts({"type": "video_url", "video_url": {"url": "https://x/y.mp4"}})), 400,
     "messages.[0].content.[1].video_url"),
]


def openai_path(loc: list) -> str:
    """A pydantic location as OpenAI names a field: ["body", "messages", 0] -> "messages.[0]"."""
    return ".".join(f"[{part}]" if isinstance(part, int) else part for part in loc[1:])


@pytest.mark.parametrize("payload, loc", SCHEMA_ERRORS)
def test_schema_violations_are_400_naming_the_field(client, payload, loc):
    response = client.post(URL, json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"]
    assert f"{openai_path(loc)}" in error["message"], error


@pytest.mark.parametrize("payload, status, param", REFUSALS)
def test_values_the_server_cannot_honour_name_the_field(client, payload, status, param):
    response = client.post(URL, json=payload)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert param.rsplit(".", 1)[-1] in error["message"]


def test_malformed_json_and_non_objects_are_400(client):
    malformed = client.post(URL, content=b'{"model": ', headers={"content-type": "application/json"})
    assert malformed.status_code == 400 and "JSON" in malformed.json()["error"]["message"]
    not_an_object = client.post(URL, json=[body()])
    assert not_an_object.status_code == 400 and "object" in not_an_object.json()["error"]["message"]


def test_unknown_model_is_404(client):
    error = client.post(URL, json=body(model="gpt-17")).json()["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model") and "gpt-17" in error["message"]


def test_non_text_parts_are_refused_by_type(client):
    for part, kind in ((IMAGE, "image"), (AUDIO, "audio"), (FILE, "file")):
        error = client.post(URL, json=body(messages=user_parts(part))).json()["error"]
        assert part["type"] in error["message"] and f"{kind} input" in error["message"]


def test_values_that_change_nothing_are_accepted(client):
    reply = chat(client, max_completion_tokens=1, service_tier="auto", verbosity="medium", store=False,
                 response_format={"type": "text"}, tool_choice="none", function_call="none",
                 modalities=["text"], reasoning_effort="none", prompt_cache_retention="in_memory",
                 echo=False, raw_output=False, return_token_ids=False, tools=[],
                 parallel_tool_calls=True, reasoning_history="disabled")
    # `thinking` is the other spelling of reasoning_effort: one of them (both: a 400).
    assert chat(client, max_completion_tokens=1, thinking={"type": "disabled"})["usage"]["completion_tokens"] == 1
    assert reply["service_tier"] == "default" and reply["usage"]["completion_tokens"] == 1
    # With no tools, `auto` calls none: the same as `none`.
    reply = chat(client, max_completion_tokens=1, tool_choice="auto", function_call="auto")
    assert reply["service_tier"] == "default" and reply["usage"]["completion_tokens"] == 1


def test_the_server_serves_after_every_refusal(client):
    for payload, _, _ in REFUSALS:
        client.post(URL, json=payload)
    for payload, _ in SCHEMA_ERRORS:
        client.post(URL, json=payload)
    reply = chat(client, messages=[{"role": "user", "content": "still there?"}], max_completion_tokens=2)
    assert reply["choices"][0]["finish_reason"] == "length" and reply["model"] == MODEL_ID
