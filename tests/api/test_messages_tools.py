"""Tool use and output formats on /v1/messages (and count_tokens), on the tiny random model.

The random model has no idea what a tool is, which makes it a hard test of the constraint:
whatever it writes, the calls must name a tool and carry an input that validates. The input
schemas are bounded (enums, bounded integers) so a random walk ends in time. Anthropic has
no seed field, so a sampled reply differs each time: the tests assert what holds for every
reply, and compare a streamed reply with a whole one under greedy decoding.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from api.core.tool_format import HERMES
from api.messages.tool_calls import StreamBlocks, answer_blocks
from generated.flint import MessageStreamEvent
from messages_helpers import MODEL_ID, URL, anthropic_error, named_events
from tool_helpers import SCHEMAS, forbid_calls, force_calls

TOOLS = [{"name": name, "description": f"{name} tool", "input_schema": schema, "strict": True}
         for name, schema in SCHEMAS.items()]
BOUNDED = {"type": "object", "properties": {
    "size": {"enum": ["s", "m", "l"]}, "count": {"type": "integer", "minimum": 0, "maximum": 50}},
    "required": ["size", "count"], "additionalProperties": False}
ASK = [{"role": "user", "content": "What now?"}]
ANY = {"type": "any"}
ONE = {"type": "any", "disable_parallel_tool_use": True}
COUNT = "/v1/messages/count_tokens"


@pytest.fixture(scope="module")
def client(tools_tiny_client):
    return tools_tiny_client


def request_body(**fields) -> dict:
    return {"model": MODEL_ID, "messages": ASK, "max_tokens": 120, "temperature": 1.0, **fields}


def ask(client, **fields) -> dict:
    response = client.post(URL, json=request_body(**fields))
    assert response.status_code == 200, response.text
    return response.json()


def ask_stream(client, **fields) -> list[tuple[str, dict]]:
    response = client.post(URL, json=request_body(stream=True, **fields))
    assert response.status_code == 200, response.text
    events = named_events(response.text)
    for _, data in events:
        MessageStreamEvent.model_validate(data)  # each event is one of the spec's shapes
    return events


def refusal(client, **fields) -> str:
    return anthropic_error(client.post(URL, json=request_body(**fields)), 400)["message"]


def validated_calls(reply: dict) -> list[tuple[str, dict]]:
    """(name, input) of a reply's tool_use blocks, each input checked against its schema."""
    calls = []
    for block in reply["content"]:
        if block["type"] == "tool_use":
            assert block["id"].startswith("toolu_") and set(block) == {"type", "id", "name", "input"}
            jsonschema.validate(block["input"], SCHEMAS[block["name"]])
            calls.append((block["name"], block["input"]))
    return calls


def streamed_blocks(events: list[tuple[str, dict]]) -> list[dict]:
    """Each streamed block: its start, its deltas' text joined, and whether it stopped."""
    blocks: list[dict] = []
    for name, data in events:
        if name == "content_block_start":
            assert data["index"] == len(blocks)
            blocks.append({"start": data["content_block"], "text": "", "stopped": False})
        elif name == "content_block_delta":
            delta = data["delta"]
            blocks[data["index"]]["text"] += delta.get("partial_json", delta.get("text", ""))
        elif name == "content_block_stop":
            blocks[data["index"]]["stopped"] = True
    assert all(block["stopped"] for block in blocks)
    return blocks


def stop_delta(events: list[tuple[str, dict]]) -> dict:
    [delta] = [data["delta"] for name, data in events if name == "message_delta"]
    return delta


def test_any_calls_validate_against_their_schemas(client):
    for _ in range(3):
        reply = ask(client, tools=TOOLS, tool_choice=ANY)
        assert validated_calls(reply)
        assert [block["type"] for block in reply["content"]] == ["tool_use"] * len(reply["content"])
        assert reply["stop_reason"] in ("tool_use", "max_tokens")


def test_disable_parallel_tool_use_allows_one_call(client):
    for _ in range(3):
        reply = ask(client, tools=TOOLS, tool_choice=ONE)
        assert len(validated_calls(reply)) == 1 and len(reply["content"]) == 1
        assert (reply["stop_reason"], reply["stop_sequence"]) == ("tool_use", None)


def test_a_named_tool_choice_calls_that_tool(client):
    for _ in range(3):
        reply = ask(client, tools=TOOLS, tool_choice={"type": "tool", "name": "get_time"})
        assert {name for name, _ in validated_calls(reply)} == {"get_time"}


AUTO_ONE = {"type": "auto", "disable_parallel_tool_use": True}
AUTO_CHOICES = [{"type": "auto"}, None, AUTO_ONE]


def auto(choice: dict | None) -> dict:
    return {"tools": TOOLS, **({"tool_choice": choice} if choice else {})}


@pytest.mark.parametrize("lead", ["", "Let me look.\n"])
@pytest.mark.parametrize("choice", AUTO_CHOICES, ids=["auto", "default", "auto-one"])
def test_auto_calls_once_the_model_writes_the_trigger(client, monkeypatch, choice, lead):
    """The text before the trigger is a text block before the tool_use blocks, which
    validate however the model goes on (tool_helpers.force_calls); parallel calls may run
    into max_tokens, which leaves out only a call it cut."""
    steered = force_calls(client, monkeypatch, lead)
    reply = ask(client, **auto(choice))
    calls = validated_calls(reply)
    assert [block["text"] for block in reply["content"] if block["type"] == "text"] == ([lead] if lead else [])
    assert [block["type"] for block in reply["content"]] == ["text"] * bool(lead) + ["tool_use"] * len(calls)
    if choice == AUTO_ONE:
        assert len(calls) == 1 and reply["stop_reason"] == "tool_use"
    else:
        assert calls and reply["stop_reason"] in ("tool_use", "max_tokens")
    assert steered.offered_calls()


@pytest.mark.parametrize("choice", AUTO_CHOICES, ids=["auto", "default", "auto-one"])
def test_auto_answers_text_when_the_model_writes_no_trigger(client, monkeypatch, choice):
    steered = forbid_calls(client, monkeypatch)
    reply = ask(client, **auto(choice))
    assert [block["type"] for block in reply["content"]] == ["text"]
    assert reply["content"][0]["text"] == steered.last_answer()
    assert reply["stop_reason"] in ("end_turn", "max_tokens")
    assert steered.offered_calls()


def test_none_answers_text_with_the_tools_in_the_prompt(client, engine_requests, tokenizer):
    reply = ask(client, tools=TOOLS, tool_choice={"type": "none"}, max_tokens=4)
    assert [block["type"] for block in reply["content"]] == ["text"]
    [request] = engine_requests
    assert request.grammar is None
    assert '"name": "get_time", "description": "get_time tool"' in tokenizer.decode(request.prompt_token_ids)


def test_streamed_input_reassembles_to_the_whole_input(client):
    fields = {"tools": TOOLS, "tool_choice": ONE, "temperature": 0}
    whole = ask(client, **fields)
    [(name, arguments)] = validated_calls(whole)
    events = ask_stream(client, **fields)
    [block] = streamed_blocks(events)
    assert block["start"]["type"] == "tool_use" and block["start"]["id"].startswith("toolu_")
    assert (block["start"]["name"], block["start"]["input"]) == (name, {})
    assert block["text"] == json.dumps(arguments)  # the fragments make exactly the whole reply's input
    assert stop_delta(events) == {"stop_reason": "tool_use", "stop_sequence": None}
    assert [name for name, _ in events][-1] == "message_stop"


def test_every_streamed_call_is_a_block_of_valid_json(client):
    for _ in range(3):
        events = ask_stream(client, tools=TOOLS, tool_choice=ANY)
        blocks = streamed_blocks(events)
        assert blocks and all(block["start"]["type"] == "tool_use" for block in blocks)
        cut = stop_delta(events)["stop_reason"] == "max_tokens"
        for block in blocks[:-1] if cut else blocks:  # a cut reply's last call may be incomplete
            jsonschema.validate(json.loads(block["text"]), SCHEMAS[block["start"]["name"]])


def test_text_then_calls_stream_as_blocks_that_match_the_whole_reply():
    """The reading of a reply under auto, fed in pieces that split the trigger and the input."""
    pieces = ["Sure. <tool", '_call>\n{"name": "get_time", "arguments": {"zone"', ': "utc"}}\n</tool_call>\n<tool_',
              'call>\n{"name": "get_weather", "arguments": {"unit": "f", "days": 3}}\n</tool_call>']
    blocks = StreamBlocks(HERMES)
    events = [*blocks.start()]
    for index, piece in enumerate(pieces):
        events += blocks.feed(piece, final=index == len(pieces) - 1)
    events += blocks.finish()
    streamed = streamed_blocks([(event.type, event.model_dump(mode="json")) for event in events])
    whole, called = answer_blocks("".join(pieces), HERMES)
    assert called and blocks.called
    assert [block["start"]["type"] for block in streamed] == [block.type for block in whole] == \
        ["text", "tool_use", "tool_use"]
    assert streamed[0]["text"] == whole[0].text == "Sure. "
    assert [json.loads(block["text"]) for block in streamed[1:]] == [block.input for block in whole[1:]] == \
        [{"zone": "utc"}, {"unit": "f", "days": 3}]
    assert [block["start"]["name"] for block in streamed[1:]] == ["get_time", "get_weather"]


def test_a_call_cut_by_max_tokens_is_left_out_of_the_whole_reply(client):
    # No call is complete in 20 tokens (the shortest takes about 24); its name may be.
    fields = {"tools": TOOLS, "tool_choice": ANY, "max_tokens": 20, "temperature": 0}
    reply = ask(client, **fields)
    assert (reply["content"], reply["stop_reason"]) == ([{"type": "text", "text": ""}], "max_tokens")
    events = ask_stream(client, **fields)
    [block] = streamed_blocks(events)  # a started call is closed where it was cut, else an empty text
    assert block["start"]["type"] == "text" or not block["text"].endswith("}")
    assert stop_delta(events)["stop_reason"] == "max_tokens"


def test_strict_tools_keep_to_their_schema(client):
    unsupported = {"type": "object", "properties": {"ids": {"type": "array", "uniqueItems": True, "maxItems": 3,
                                                            "items": {"enum": [1, 2]}}}, "additionalProperties": False}
    tool = {"name": "pick", "input_schema": unsupported, "strict": True}
    message = refusal(client, tools=[tool], tool_choice=ONE)
    assert "`tools.[0].input_schema`" in message and "uniqueItems" in message
    tool["strict"] = False  # lenient: the keyword is skipped, the rest enforced
    [block] = ask(client, tools=[tool], tool_choice=ONE)["content"]
    assert block["type"] == "tool_use" and set(block["input"]) <= {"ids"}
    assert len(block["input"].get("ids", [])) <= 3 and set(block["input"].get("ids", [])) <= {1, 2}


def test_input_examples_follow_the_description(client, engine_requests, tokenizer):
    tool = {**TOOLS[1], "input_examples": [{"zone": "utc"}, {"zone": "pst"}]}
    ask(client, tools=[tool], max_tokens=1)
    prompt = tokenizer.decode(engine_requests[-1].prompt_token_ids)
    description = 'get_time tool\n\nExample inputs:\n{"zone": "utc"}\n{"zone": "pst"}'
    assert f'"description": {json.dumps(description)}' in prompt


def test_tool_history_renders_in_the_default_format(client, engine_requests, tokenizer):
    """The same conversation as chat messages, sent to /v1/chat/completions, is the reference."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"unit": "c", "days": 2}}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, call]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                     "content": [{"type": "text", "text": "Rain"}, {"type": "text", "text": "later"}]},
                    {"type": "text", "text": "And now?"}]}]
    ask(client, messages=messages, tools=TOOLS, max_tokens=1)
    chat_messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"unit": "c", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: Rain\nlater"},
        {"role": "user", "content": "And now?"}]
    chat_tools = [{"type": "function", "function": {"name": tool["name"], "description": tool["description"],
                                                    "parameters": tool["input_schema"], "strict": True}}
                  for tool in TOOLS]
    response = client.post("/v1/chat/completions", json={"model": MODEL_ID, "messages": chat_messages,
                                                          "tools": chat_tools, "max_completion_tokens": 1})
    assert response.status_code == 200, response.text
    [from_messages, from_chat] = [request.prompt_token_ids for request in engine_requests]
    assert from_messages == from_chat
    prompt = tokenizer.decode(from_messages)
    assert 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "days": 2}}\n' in prompt
    assert prompt.index("<tool_response>\nSunny\n") < prompt.index("<tool_response>\nError: Rain\nlater\n") \
        < prompt.index("And now?")


def test_output_config_format_answers_validate(client, engine_requests):
    for _ in range(3):
        reply = ask(client, output_config={"format": {"type": "json_schema", "schema": BOUNDED}})
        [block] = reply["content"]
        jsonschema.validate(json.loads(block["text"]), BOUNDED)
        assert reply["stop_reason"] == "end_turn"
    assert all(request.grammar is not None for request in engine_requests)


BOUNDED_FORMAT = {"format": {"type": "json_schema", "schema": BOUNDED}}


def test_a_format_and_tools_under_auto_call_once_the_model_writes_the_trigger(client, monkeypatch):
    steered = force_calls(client, monkeypatch)
    reply = ask(client, **auto(AUTO_ONE), output_config=BOUNDED_FORMAT)
    assert len(validated_calls(reply)) == len(reply["content"]) == 1 and reply["stop_reason"] == "tool_use"
    assert steered.offered_calls()


def test_a_format_and_tools_under_auto_otherwise_answer_the_json(client, monkeypatch):
    steered = forbid_calls(client, monkeypatch)
    reply = ask(client, tools=TOOLS, output_config=BOUNDED_FORMAT)
    [block] = reply["content"]
    assert block["text"] == steered.last_answer()
    jsonschema.validate(json.loads(block["text"]), BOUNDED)
    assert reply["stop_reason"] == "end_turn"
    assert steered.offered_calls()


def test_tool_cache_control_is_served_by_the_prefix_cache(client):
    tools = [TOOLS[0], {**TOOLS[1], "description": "A tool no other test has", "cache_control": {"type": "ephemeral"}}]
    first = ask(client, tools=tools, tool_choice={"type": "none"}, max_tokens=1)["usage"]
    second = ask(client, tools=tools, tool_choice={"type": "none"}, max_tokens=1)["usage"]
    assert second["input_tokens"] + second["cache_read_input_tokens"] == \
        first["input_tokens"] + first["cache_read_input_tokens"]
    assert second["cache_read_input_tokens"] >= 3 * 16 and second["input_tokens"] < first["input_tokens"]


def count(client, **fields) -> int:
    response = client.post(COUNT, json={"model": MODEL_ID, "messages": ASK, **fields})
    assert response.status_code == 200, response.text
    return response.json()["input_tokens"]


def test_count_tokens_counts_the_tools(client, engine_requests):
    counted = count(client, tools=TOOLS, tool_choice=ANY)
    ask(client, tools=TOOLS, tool_choice=ANY, max_tokens=1)
    [request] = engine_requests
    assert counted == len(request.prompt_token_ids)
    assert counted > count(client) + 50  # the tools' preamble
    assert count(client, tools=TOOLS, tool_choice={"type": "none"}) == counted  # the tools stay in the prompt
    bad = {"output_config": {"format": {"type": "json_schema", "schema": {"type": "string", "pattern": "(a"}}}}
    refused = anthropic_error(client.post(COUNT, json={"model": MODEL_ID, "messages": ASK, **bad}), 400)
    assert refused == anthropic_error(client.post(URL, json=request_body(**bad)), 400)


HOSTED = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
USE = {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"zone": "utc"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "noon"}


@pytest.mark.parametrize("fields, param, why", [
    ({"tool_choice": ANY}, "tool_choice", "no tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name", "not among the tools"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools.[1].name", "two tools"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "objekt"}}}}]},
     "tools.[0].input_schema", "objekt"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "string", "pattern": "(a"}}}},
     "output_config.format.schema", "constrain"),
    ({"tools": [{**TOOLS[0], "defer_loading": True}]}, "tools.[0].defer_loading", "tool search"),
    ({"tools": [{**TOOLS[0], "allowed_callers": ["code_execution_20250825"]}]}, "tools.[0].allowed_callers",
     "hosted tools"),
    ({"messages": [*ASK, {"role": "assistant", "content": [USE]}]}, "messages.[1].content", "tool_use"),
    ({"messages": [*ASK, {"role": "assistant", "content": [RESULT]}, *ASK]}, "messages.[1].content.[0]",
     "user messages"),
    ({"messages": [{"role": "user", "content": [{**RESULT, "content": [{"type": "tool_reference",
                                                                           "tool_name": "get_time"}]}]}]},
     "messages.[0].content.[0].content.[0].tool_name", "tool search"),
    ({"messages": [*ASK, {"role": "assistant", "content": [{**USE, "caller": {"type": "code_execution_20250825",
                                                                              "tool_id": "srvtoolu_1"}}]}, *ASK]},
     "messages.[1].content.[0].caller", "hosted tools"),
], ids=lambda value: value if isinstance(value, str) and "." in value else None)
def test_bad_tool_requests_are_refused_by_field(client, fields, param, why):
    message = refusal(client, **fields)
    assert f"`{param}`" in message and why in message, message


@pytest.mark.parametrize("tools, field", [
    ([HOSTED], "tools.0"),  # Anthropic's hosted tools are not in the spec
    ([{"name": "bad name", "input_schema": {"type": "object"}}], "tools.0.name"),
    ([{"name": "f", "input_schema": {"type": "array"}}], "tools.0.input_schema.type"),
])
def test_tools_outside_the_spec_are_schema_errors(client, tools, field):
    assert refusal(client, tools=tools).startswith(field)
