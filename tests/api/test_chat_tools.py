"""Tool calling on /v1/chat/completions, on the tiny random model.

The random model has no idea what a tool is, which makes it a hard test of the constraint:
whatever it writes, the calls must have a valid name and arguments that validate. The
argument schemas are bounded (enums, bounded integers) so a random walk ends in time.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from chat_helpers import MODEL_ID, URL, sse_payloads
from tool_helpers import SCHEMAS, TIME, forbid_calls, force_calls

TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": schema,
                                           "strict": True}} for name, schema in SCHEMAS.items()]
SQL_GRAMMAR = 'start: "SELECT " COLUMN " FROM t"\nCOLUMN: /[a-z]{1,8}/'


@pytest.fixture(scope="module")
def client(tools_tiny_client):
    return tools_tiny_client


def ask(client, **fields) -> dict:
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "What now?"}], "max_completion_tokens": 120,
            "seed": 1, "temperature": 1.0, **fields}
    response = client.post(URL, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def refused(client, **fields) -> dict:
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "What now?"}], **fields}
    response = client.post(URL, json=body)
    assert response.status_code == 400, response.text
    return response.json()["error"]


def validated_calls(choice: dict) -> list[tuple[str, dict]]:
    """(name, arguments) of a choice's calls, each checked against its tool's schema."""
    calls = []
    for call in choice["message"]["tool_calls"]:
        assert call["type"] == "function" and call["id"].startswith("call_")
        arguments = json.loads(call["function"]["arguments"])
        jsonschema.validate(arguments, SCHEMAS[call["function"]["name"]])
        calls.append((call["function"]["name"], arguments))
    return calls


def test_required_calls_validate_against_their_schemas(client):
    answer = ask(client, tools=TOOLS, tool_choice="required", n=4)
    for choice in answer["choices"]:
        assert validated_calls(choice)
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] is None


def test_streamed_calls_reassemble_to_the_whole_answer(client):
    whole = ask(client, tools=TOOLS, tool_choice="required", seed=7)["choices"][0]["message"]["tool_calls"]
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "What now?"}], "max_completion_tokens": 120,
            "seed": 7, "temperature": 1.0, "tools": TOOLS, "tool_choice": "required", "stream": True}
    chunks = [c for c in sse_payloads(client.post(URL, json=body).text) if c != "[DONE]"]
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for piece in chunk["choices"][0]["delta"].get("tool_calls") or []:
            call = calls.setdefault(piece["index"], {"name": None, "arguments": ""})
            if piece.get("id"):
                assert call["name"] is None and piece["function"]["name"]  # id and name come first, once
                call["name"] = piece["function"]["name"]
            call["arguments"] += piece["function"].get("arguments") or ""
    assert [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in whole]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_named_tool_choice_calls_that_tool(client):
    answer = ask(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}, n=3)
    for choice in answer["choices"]:
        assert {name for name, _ in validated_calls(choice)} == {"get_time"}


def test_allowed_tools_narrow_the_calls(client):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}}
    answer = ask(client, tools=TOOLS, tool_choice=choice, n=3)
    for choice in answer["choices"]:
        assert {name for name, _ in validated_calls(choice)} == {"get_weather"}


def test_without_parallel_calls_there_is_one_call(client):
    answer = ask(client, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, n=4)
    assert all(len(validated_calls(choice)) == 1 for choice in answer["choices"])


JSON_TIME = {"type": "json_schema", "json_schema": {"name": "t", "schema": TIME, "strict": True}}


@pytest.mark.parametrize("lead", ["", "Let me look.\n"])
def test_auto_calls_once_the_model_writes_the_trigger(client, monkeypatch, lead):
    """The text before the trigger is the content, and the rest is one call that validates,
    however the model goes on (tool_helpers.force_calls makes it write the trigger)."""
    steered = force_calls(client, monkeypatch, lead)
    answer = ask(client, tools=TOOLS, parallel_tool_calls=False, n=4)
    assert steered.offered_calls()
    for choice in answer["choices"]:
        assert len(validated_calls(choice)) == 1
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == (lead or None)


def test_auto_answers_text_when_the_model_writes_no_trigger(client, monkeypatch):
    steered = forbid_calls(client, monkeypatch)
    answer = ask(client, tools=TOOLS, n=4)
    assert steered.offered_calls()
    for choice in answer["choices"]:
        assert "tool_calls" not in choice["message"] and choice["finish_reason"] in ("stop", "length")
    assert sorted(choice["message"]["content"] for choice in answer["choices"]) == steered.answers()


def test_auto_with_a_json_format_calls_once_the_model_writes_the_trigger(client, monkeypatch):
    steered = force_calls(client, monkeypatch)
    answer = ask(client, tools=TOOLS, parallel_tool_calls=False, n=4, response_format=JSON_TIME)
    assert steered.offered_calls()
    for choice in answer["choices"]:
        assert len(validated_calls(choice)) == 1 and choice["message"]["content"] is None
        assert choice["finish_reason"] == "tool_calls"


def test_auto_with_a_json_format_otherwise_answers_that_json(client, monkeypatch):
    steered = forbid_calls(client, monkeypatch)
    answer = ask(client, tools=TOOLS, n=4, response_format=JSON_TIME)
    assert steered.offered_calls()
    for choice in answer["choices"]:
        assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["message"]["content"]), TIME)
    assert sorted(choice["message"]["content"] for choice in answer["choices"]) == steered.answers()


def test_strict_tools_keep_to_their_schema(client):
    # Bounded (no other keys, at most four items), so that any draw finishes within the tokens.
    unsupported = {"type": "object", "additionalProperties": False,
                   "properties": {"ids": {"type": "array", "uniqueItems": True, "maxItems": 4,
                                          "items": {"enum": [1, 2]}}}}
    tool = {"type": "function", "function": {"name": "pick", "parameters": unsupported, "strict": True}}
    error = refused(client, tools=[tool], tool_choice="required")
    assert error["param"] == "tools.[0].function.parameters" and "uniqueItems" in error["message"]
    tool["function"]["strict"] = False  # lenient: the keyword is skipped, the rest enforced
    answer = ask(client, tools=[tool], tool_choice="required")
    for call in answer["choices"][0]["message"]["tool_calls"]:
        assert all(item in (1, 2) for item in json.loads(call["function"]["arguments"]).get("ids", []))


def test_deprecated_functions_answer_a_function_call(client):
    functions = [{"name": name, "parameters": schema} for name, schema in SCHEMAS.items()]
    message = ask(client, functions=functions, function_call={"name": "get_time"})["choices"][0]
    assert message["finish_reason"] == "function_call"
    call = message["message"]["function_call"]
    assert call["name"] == "get_time"
    jsonschema.validate(json.loads(call["arguments"]), TIME)


def test_custom_tools_follow_their_grammar(client):
    tools = [{"type": "custom", "custom": {"name": "sql", "format": {
                  "type": "grammar", "grammar": {"syntax": "lark", "definition": SQL_GRAMMAR}}}},
             {"type": "custom", "custom": {"name": "code", "format": {
                  "type": "grammar", "grammar": {"syntax": "regex", "definition": "[0-9]{3}-[a-z]{2}"}}}}]
    for name, pattern in (("sql", r"SELECT [a-z]{1,8} FROM t"), ("code", r"[0-9]{3}-[a-z]{2}")):
        answer = ask(client, tools=tools, tool_choice={"type": "custom", "custom": {"name": name}})
        [call] = answer["choices"][0]["message"]["tool_calls"]
        assert call["type"] == "custom" and call["custom"]["name"] == name
        assert re.fullmatch(pattern, call["custom"]["input"]), call


def test_tool_history_renders_in_the_default_format(client, engine_requests, tokenizer):
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": '{"unit": "c", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]
    ask(client, messages=messages, tools=TOOLS, max_completion_tokens=2)
    prompt = tokenizer.decode(engine_requests[-1].prompt_token_ids)
    assert '"name": "get_weather", "description": "get_weather tool"' in prompt  # the preamble
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "days": 2}}\n</tool_call>' in prompt
    assert "<tool_response>\nSunny\n</tool_response>" in prompt


def test_a_deprecated_function_call_renders_as_history(client, engine_requests, tokenizer):
    messages = [{"role": "user", "content": "Time?"},
                {"role": "assistant", "content": None, "function_call": {"name": "get_time",
                                                                        "arguments": '{"zone": "utc"}'}},
                {"role": "function", "name": "get_time", "content": "noon"}]
    ask(client, messages=messages, max_completion_tokens=2)
    prompt = tokenizer.decode(engine_requests[-1].prompt_token_ids)
    assert '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>' in prompt
    assert "<tool_response>\nnoon\n</tool_response>" in prompt


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]},
     "tools.[0].function.parameters"),
    ({"tools": [{"type": "custom", "custom": {"name": "g", "format": {"type": "grammar", "grammar": {
        "syntax": "lark", "definition": "start: missing"}}}}]}, "tools.[0].custom.format.grammar.definition"),
    ({"tools": [{"type": "custom", "custom": {"name": "g"}}], "stream": True}, "stream"),
    ({"tools": TOOLS, "response_format": {"type": "grammar", "grammar": 'root ::= "x"'}}, "response_format"),
])
def test_bad_tool_requests_are_refused_by_field(client, fields, param):
    assert refused(client, **fields)["param"] == param
