"""Tool calling on /v1/responses, on the tiny random model.

The random model has no idea what a tool is, which makes it a hard test of the constraint:
whatever it writes, the calls must have a valid name and arguments that validate. The
argument schemas are bounded (enums, bounded integers) so a random walk ends in time. The
Responses API takes no seed, so sampled answers differ from run to run: a test asserts what
holds for every sample, and compares streamed with whole answers greedily.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from generated.flint import Response, ResponseStreamEvent
from responses_helpers import MODEL_ID, URL, named_events
from tool_helpers import SCHEMAS, TIME, forbid_calls, force_calls

TOOLS = [{"type": "function", "name": name, "description": f"{name} tool", "parameters": schema}
         for name, schema in SCHEMAS.items()]


@pytest.fixture(scope="module")
def client(tools_tiny_client):
    return tools_tiny_client


def request_body(**fields) -> dict:
    return {"model": MODEL_ID, "input": "What now?", "max_output_tokens": 160, "temperature": 1.0,
            "tools": TOOLS, **fields}


def ask(client, **fields) -> dict:
    response = client.post(URL, json=request_body(**fields))
    assert response.status_code == 200, response.text
    Response.model_validate(response.json())
    return response.json()


def refused(client, **fields) -> dict:
    response = client.post(URL, json=request_body(**fields))
    assert response.status_code == 400, response.text
    return response.json()["error"]


def calls_of(response: dict) -> list[dict]:
    return [item for item in response["output"] if item["type"] == "function_call"]


def validated_calls(response: dict) -> list[tuple[str, dict]]:
    """(name, arguments) of a response's finished calls, each checked against its tool's
    schema; only the last call may be unfinished, and only when max_output_tokens cut it."""
    calls, found = calls_of(response), []
    for position, call in enumerate(calls):
        assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
        if call["status"] == "incomplete":
            assert position == len(calls) - 1 and response["status"] == "incomplete"
            continue
        assert call["status"] == "completed"
        arguments = json.loads(call["arguments"])
        jsonschema.validate(arguments, SCHEMAS[call["name"]])
        found.append((call["name"], arguments))
    return found


def test_required_calls_validate_against_their_schemas(client):
    for _ in range(3):
        response = ask(client, tool_choice="required")
        assert validated_calls(response)
        assert [item["type"] for item in response["output"]] == ["function_call"] * len(calls_of(response))
        assert response["tools"] == [{**tool, "strict": True} for tool in TOOLS]
        assert (response["tool_choice"], response["parallel_tool_calls"]) == ("required", True)


def streamed_calls(events: list[dict]) -> dict[str, dict]:
    """Each streamed call by item id: its added item, its deltas joined, its done events."""
    calls: dict[str, dict] = {}
    for event in events:
        if event["type"] == "response.output_item.added" and event["item"]["type"] == "function_call":
            assert event["item"]["arguments"] == "" and event["item"]["status"] == "in_progress"
            calls[event["item"]["id"]] = {"added": event, "arguments": ""}
        elif event["type"] == "response.function_call_arguments.delta":
            calls[event["item_id"]]["arguments"] += event["delta"]
        elif event["type"] == "response.function_call_arguments.done":
            calls[event["item_id"]]["done"] = event
        elif event["type"] == "response.output_item.done" and event["item"]["type"] == "function_call":
            calls[event["item"]["id"]]["item"] = event["item"]
    return calls


def test_streamed_calls_match_the_whole_answer(client):
    fields = {"tool_choice": "required", "temperature": 0}
    whole = ask(client, **fields)
    response = client.post(URL, json=request_body(stream=True, **fields))
    events = named_events(response.text)
    for event in events:
        ResponseStreamEvent.model_validate(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    calls = streamed_calls(events)
    final = events[-1]["response"]
    assert final["output"] == [call["item"] for call in calls.values()]
    for index, call in enumerate(calls.values()):
        assert call["added"]["output_index"] == call["done"]["output_index"] == index
        assert call["done"]["arguments"] == call["arguments"] == call["item"]["arguments"]
        assert call["done"]["name"] == call["item"]["name"] == call["added"]["item"]["name"]
    # Greedy: the same calls as the whole answer (their ids are new each time).
    assert [(c["name"], c["arguments"], c["status"]) for c in final["output"]] == \
        [(c["name"], c["arguments"], c["status"]) for c in whole["output"]]
    assert final["status"] == whole["status"] and validated_calls(final)


def test_a_named_tool_choice_calls_that_tool(client):
    for _ in range(3):
        response = ask(client, tool_choice={"type": "function", "name": "get_time"})
        assert {name for name, _ in validated_calls(response)} == {"get_time"}


def test_without_parallel_calls_there_is_one_call(client):
    for _ in range(3):
        response = ask(client, tool_choice="required", parallel_tool_calls=False)
        assert len(validated_calls(response)) == len(calls_of(response)) == 1
        assert response["status"] == "completed" and response["parallel_tool_calls"] is False


def test_max_tool_calls_bounds_the_calls(client):
    for _ in range(4):
        response = ask(client, tool_choice="required", max_tool_calls=2, max_output_tokens=300)
        assert 1 <= len(calls_of(response)) <= 2 and response["max_tool_calls"] == 2
        validated_calls(response)
    one = ask(client, tool_choice="required", max_tool_calls=1)
    assert len(validated_calls(one)) == len(calls_of(one)) == 1 and one["status"] == "completed"


def messages_of(response: dict) -> list[dict]:
    return [item for item in response["output"] if item["type"] == "message"]


@pytest.mark.parametrize("lead", ["", "Let me look.\n"])
def test_auto_calls_once_the_model_writes_the_trigger(client, monkeypatch, lead):
    """The text before the trigger is a message before the calls, and the rest one or two
    calls that validate, however the model goes on (tool_helpers.force_calls)."""
    steered = force_calls(client, monkeypatch, lead)
    for _ in range(2):
        response = ask(client, max_tool_calls=2, max_output_tokens=300)
        assert 1 <= len(validated_calls(response)) == len(calls_of(response)) <= 2
        assert response["status"] == "completed"
        texts = [message["content"][0]["text"] for message in messages_of(response)]
        assert texts == ([lead] if lead else [])
        assert response["output"][0]["type"] == ("message" if lead else "function_call")
    assert steered.offered_calls()


def test_auto_answers_text_when_the_model_writes_no_trigger(client, monkeypatch):
    steered = forbid_calls(client, monkeypatch)
    for _ in range(2):
        response = ask(client)
        [message] = response["output"]
        assert message["type"] == "message" and message["content"][0]["type"] == "output_text"
        assert message["content"][0]["text"] == steered.last_answer()
    assert steered.offered_calls()


JSON_TIME = {"format": {"type": "json_schema", "name": "zone", "schema": TIME, "strict": True}}


def test_auto_with_a_json_format_calls_once_the_model_writes_the_trigger(client, monkeypatch):
    steered = force_calls(client, monkeypatch)
    for _ in range(2):
        response = ask(client, text=JSON_TIME, parallel_tool_calls=False)
        assert len(validated_calls(response)) == len(response["output"]) == 1
        assert response["status"] == "completed"
    assert steered.offered_calls()


def test_auto_with_a_json_format_otherwise_answers_that_json(client, monkeypatch):
    steered = forbid_calls(client, monkeypatch)
    for _ in range(2):
        response = ask(client, text=JSON_TIME)
        [message] = response["output"]
        assert message["content"][0]["text"] == steered.last_answer()
        jsonschema.validate(json.loads(message["content"][0]["text"]), TIME)
        assert response["status"] == "completed"
    assert steered.offered_calls()


def test_strict_tools_keep_to_their_schema(client):
    unsupported = {"type": "object", "properties": {"ids": {"type": "array", "uniqueItems": True, "maxItems": 4,
                                                            "items": {"enum": [1, 2]}}},
                   "required": ["ids"], "additionalProperties": False}
    tool = {"type": "function", "name": "pick", "parameters": unsupported}  # strict by default
    error = refused(client, tools=[tool], tool_choice="required")
    assert error["param"] == "tools.[0].parameters" and "uniqueItems" in error["message"]
    response = ask(client, tools=[{**tool, "strict": False}], tool_choice="required", parallel_tool_calls=False)
    [call] = calls_of(response)  # lenient: the keyword is skipped, the rest enforced
    ids = json.loads(call["arguments"])["ids"]
    assert len(ids) <= 4 and all(item in (1, 2) for item in ids)


def test_function_call_items_render_as_history(client, engine_requests, tokenizer):
    items = [
        {"role": "user", "content": "Weather and time?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"unit": "c", "days": 2}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": '{"zone": "utc"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Noon"},
    ]
    ask(client, input=items, max_output_tokens=2)
    prompt = tokenizer.decode(engine_requests[-1].prompt_token_ids)
    assert '"name": "get_weather", "description": "get_weather tool"' in prompt  # the preamble
    calls = ('<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "days": 2}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>')
    assert f"<|im_start|>assistant\n{calls}<|im_end|>" in prompt  # one assistant turn with both calls
    assert "<tool_response>\nSunny\n</tool_response>" in prompt and "<tool_response>\nNoon\n</tool_response>" in prompt


def test_stored_calls_continue_with_previous_response_id(client, engine_requests, tokenizer):
    first = ask(client, tool_choice="required", parallel_tool_calls=False)
    [call] = calls_of(first)
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}
    ask(client, previous_response_id=first["id"], input=[output], max_output_tokens=2)
    prompt = tokenizer.decode(engine_requests[-1].prompt_token_ids)
    assert f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}\n</tool_call>' in prompt
    assert prompt.index("</tool_call>") < prompt.index("<tool_response>\nSunny\n</tool_response>")


@pytest.mark.parametrize("fields, param", [
    ({"tools": None, "tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"tools": [{"type": "function", "name": "bad name"}]}, "tools.[0].name"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "objekt"}}]}, "tools.[0].parameters"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
        "s": {"type": "string", "pattern": "(a"}}}}]}, "tools.[0].parameters"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
])
def test_bad_tool_requests_are_refused_by_field(client, fields, param):
    assert refused(client, **fields)["param"] == param


def test_other_tool_types_are_refused(client):
    error = refused(client, tools=[{"type": "web_search"}])
    assert error["param"].startswith("tools.[0]") and error["type"] == "invalid_request_error"
