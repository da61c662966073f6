"""The Responses API on a live server with the embedded SmolLM2, driven by the `openai` SDK:
create (whole and streamed), previous_response_id, retrieve, input items and delete, tool
calls and JSON schema output."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
INSTRUCTIONS = "You are a concise assistant."
QUESTION = "Name a colour of the sky."
STREAM_ORDER = ["response.created", "response.in_progress", "response.output_item.added",
                "response.content_part.added"]
STREAM_CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


def create(sdk, **fields):
    return sdk.responses.create(model=MODEL_ID, **{
        "instructions": INSTRUCTIONS, "input": QUESTION, "temperature": 0, "max_output_tokens": 8, **fields})


def rendered_count(tokenizer, messages) -> int:
    return len(tokenizer.encode(tokenizer.render_chat(messages), add_special_tokens=False))


def test_a_response_counts_the_rendered_prompt(sdk, smollm2_tokenizer):
    response = create(sdk)
    expected = rendered_count(smollm2_tokenizer, [{"role": "system", "content": INSTRUCTIONS},
                                                  {"role": "user", "content": QUESTION}])
    assert response.usage.input_tokens == expected
    assert response.usage.total_tokens == expected + response.usage.output_tokens
    assert response.id.startswith("resp_") and response.model == MODEL_ID and response.output_text
    assert response.status in ("completed", "incomplete")
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens" and response.usage.output_tokens == 8


def test_streamed_events_come_in_order_and_match_the_whole_response(sdk):
    whole = create(sdk)
    events = list(create(sdk, stream=True))
    types = [event.type for event in events]
    assert types[:4] == STREAM_ORDER and types[-4:-1] == STREAM_CLOSING
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert types[-1] == {"completed": "response.completed", "incomplete": "response.incomplete"}[whole.status]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas) == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_the_sdk_stream_helper_assembles_the_response(sdk):
    # Room for the whole answer: the helper's final response is that of response.completed.
    fields = {"instructions": INSTRUCTIONS, "input": QUESTION, "temperature": 0, "max_output_tokens": 64}
    whole = sdk.responses.create(model=MODEL_ID, **fields)
    assert whole.status == "completed"
    with sdk.responses.stream(model=MODEL_ID, **fields) as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == whole.output_text
    assert final.id != whole.id and final.usage.output_tokens == whole.usage.output_tokens


def test_previous_response_id_carries_the_conversation(sdk, smollm2_tokenizer):
    first = create(sdk)
    second = sdk.responses.create(model=MODEL_ID, previous_response_id=first.id, input="And at night?",
                                  temperature=0, max_output_tokens=8)
    # The first turn's instructions are not carried over; its input and output are.
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "And at night?"}]
    assert second.usage.input_tokens == rendered_count(smollm2_tokenizer, history)
    assert second.usage.input_tokens >= first.usage.output_tokens + rendered_count(
        smollm2_tokenizer, [{"role": "user", "content": "And at night?"}])
    assert second.previous_response_id == first.id


def test_retrieve_input_items_and_delete(sdk):
    created = create(sdk, metadata={"case": "live"})
    retrieved = sdk.responses.retrieve(created.id)
    assert retrieved.output_text == created.output_text and retrieved.metadata == {"case": "live"}
    [item] = sdk.responses.input_items.list(created.id).data
    assert item.type == "message" and item.role == "user" and item.content[0].text == QUESTION
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)


WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}


def test_a_required_tool_call_validates(sdk):
    tool = {"type": "function", "name": "get_weather", "description": "The forecast for a city",
            "parameters": WEATHER, "strict": True}
    response = sdk.responses.create(model=MODEL_ID, input="What is the weather in Paris this week?", tools=[tool],
                                    tool_choice="required", parallel_tool_calls=False, temperature=0,
                                    max_output_tokens=64)
    [call] = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_a_json_schema_text_format_validates(sdk):
    text = {"format": {"type": "json_schema", "name": "forecast", "schema": WEATHER, "strict": True}}
    response = sdk.responses.create(model=MODEL_ID, input="Give a forecast as JSON.", text=text, temperature=0,
                                    max_output_tokens=64)
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), WEATHER)
