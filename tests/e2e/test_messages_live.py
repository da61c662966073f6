"""Anthropic Messages on a live server with the embedded SmolLM2, driven by the `anthropic` SDK."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
SYSTEM = "You are a concise assistant."
MESSAGES = [{"role": "user", "content": "Name a colour of the sky."}]


@pytest.fixture(scope="module")
def sdk(live_server) -> anthropic.Anthropic:
    # The SDK adds /v1/messages to the base URL itself. A timeout of our own spares the SDK
    # its estimate from max_tokens, which cannot be made when max_tokens is left out.
    return anthropic.Anthropic(base_url=live_server, api_key="not-needed", max_retries=0, timeout=300)


# Recent SDKs dropped the sampling arguments from create() and stream() (newer Claude models
# fix them), so greedy decoding is asked for in the body directly.
GREEDY = {"temperature": 0}


def create(sdk, **fields):
    return sdk.messages.create(model=MODEL_ID, extra_body=GREEDY,
                               **{"system": SYSTEM, "messages": MESSAGES, "max_tokens": 10, **fields})


def test_a_message_counts_the_rendered_prompt(sdk, smollm2_tokenizer):
    reply = create(sdk)
    conversation = [{"role": "system", "content": SYSTEM}, *MESSAGES]
    prompt = smollm2_tokenizer.encode(smollm2_tokenizer.render_chat(conversation), add_special_tokens=False)
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == len(prompt)
    assert reply.id.startswith("msg_") and reply.role == "assistant" and reply.model == MODEL_ID
    [block] = reply.content
    assert block.type == "text" and block.text
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.stop_sequence is None
    assert 0 < reply.usage.output_tokens <= 10


def test_the_stream_assembles_the_same_message(sdk):
    whole = create(sdk)
    with sdk.messages.stream(model=MODEL_ID, system=SYSTEM, messages=MESSAGES, extra_body=GREEDY,
                             max_tokens=10) as events:
        text = "".join(events.text_stream)
        final = events.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)
    assert final.id.startswith("msg_") and final.id != whole.id


def test_stop_sequences_give_stop_reason_stop_sequence(sdk):
    whole = create(sdk, max_tokens=12).content[0].text
    stop = whole[len(whole) // 2: len(whole) // 2 + 2]
    cut = create(sdk, max_tokens=12, stop_sequences=[stop])
    assert cut.content[0].text == whole[: whole.find(stop)]
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", stop)


def test_a_missing_max_tokens_is_an_invalid_request_error(sdk):
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.messages.create(model=MODEL_ID, messages=MESSAGES, max_tokens=anthropic.NOT_GIVEN)
    assert refused.value.status_code == 400
    body = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("max_tokens")


# --- tools and output formats -----------------------------------------------------------

WEATHER = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["unit", "days"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "The weather forecast in Paris", "input_schema": WEATHER,
          "strict": True}]
ASK_WEATHER = [{"role": "user", "content": "What will the weather be in Paris for the next three days?"}]
FORECAST = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                             "sunny": {"type": "boolean"}},
            "required": ["city", "sunny"], "additionalProperties": False}


def tool_uses(message) -> list:
    """The message's tool_use blocks, each input checked against the tool's schema."""
    uses = [block for block in message.content if block.type == "tool_use"]
    for block in uses:
        assert block.name == "get_weather" and block.id.startswith("toolu_")
        jsonschema.validate(block.input, WEATHER)
    return uses


def test_tool_choice_any_gives_a_tool_use_block_that_validates(sdk):
    reply = create(sdk, messages=ASK_WEATHER, tools=TOOLS, tool_choice={"type": "any"}, max_tokens=120)
    assert tool_uses(reply)
    assert reply.stop_reason in ("tool_use", "max_tokens")


def test_a_streamed_tool_use_block_validates(sdk):
    with sdk.messages.stream(model=MODEL_ID, system=SYSTEM, messages=ASK_WEATHER, extra_body=GREEDY, tools=TOOLS,
                             tool_choice={"type": "any", "disable_parallel_tool_use": True},
                             max_tokens=120) as events:
        partial = "".join(event.partial_json for event in events if event.type == "input_json")
        final = events.get_final_message()
    [block] = tool_uses(final)
    assert json.loads(partial) == block.input and final.stop_reason == "tool_use"


def test_an_output_format_gives_text_that_validates(sdk):
    reply = create(sdk, messages=[{"role": "user", "content": "Is it sunny in Paris? Answer in JSON."}],
                   output_config={"format": {"type": "json_schema", "schema": FORECAST}}, max_tokens=60)
    [block] = reply.content
    assert block.type == "text" and reply.stop_reason == "end_turn"
    jsonschema.validate(json.loads(block.text), FORECAST)
