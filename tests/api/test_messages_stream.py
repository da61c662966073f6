"""POST /v1/messages with `stream: true` on the tiny-model app: Anthropic's named events."""

from __future__ import annotations

from dataclasses import replace


from api.core.generation import ChoiceEvent
from api.core.usage import Usage
from api.messages.render import closing_events
from api.core.sse import encode_event
from generated.flint import MessageStopEvent, MessageStreamEvent
from messages_helpers import create, stream

EXPECTED_ORDER = ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                  "message_delta", "message_stop"]


def squeeze(names: list[str]) -> list[str]:
    """The names with runs of the same name collapsed (the deltas)."""
    return [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]


def streamed_text(events) -> str:
    return "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")


def test_stream_events_come_in_anthropics_order_and_match_the_message(client):
    whole = create(client, max_tokens=8)
    events = stream(client, max_tokens=8)
    for _, data in events:
        MessageStreamEvent.model_validate(data)  # each event is one of the spec's shapes
    assert squeeze([name for name, _ in events]) == EXPECTED_ORDER
    start, block_start, *_, block_stop, delta, _ = (data for _, data in events)
    assert start["message"]["content"] == [] and start["message"]["stop_reason"] is None
    assert start["message"]["id"].startswith("msg_") and start["message"]["model"] == whole["model"]
    prompt = whole["usage"]["input_tokens"] + whole["usage"]["cache_read_input_tokens"]
    started = start["message"]["usage"]
    assert started["input_tokens"] + started["cache_read_input_tokens"] == prompt
    assert block_start["content_block"] == {"type": "text", "text": ""} and block_stop["index"] == 0
    assert streamed_text(events) == whole["content"][0]["text"]
    assert delta["delta"] == {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == whole["usage"]["output_tokens"] == 8


def test_a_streamed_stop_sequence_is_reported_in_message_delta(client):
    whole = create(client, max_tokens=10)["content"][0]["text"]
    stop = whole[len(whole) // 2: len(whole) // 2 + 2]
    events = stream(client, max_tokens=10, stop_sequences=[stop])
    assert streamed_text(events) == whole[: whole.find(stop)]
    [delta] = [data for name, data in events if name == "message_delta"]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}
    assert [name for name, _ in events][-1] == "message_stop"


def test_named_events_carry_an_event_line_and_no_done():
    assert encode_event(MessageStopEvent(type="message_stop"), named=True) == (
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert encode_event({"type": "ping"}, named=True) == b'event: ping\ndata: {"type":"ping"}\n\n'


def test_a_generation_that_breaks_off_ends_with_an_error_event():
    """An engine failure mid-stream (finish "error") cannot change the 200 already sent:
    the stream ends with Anthropic's `error` event instead of the stop events."""
    broken = ChoiceEvent(index=0, prompt_index=0, text="", token_ids=[], logprobs=None, finish_reason="error",
                         num_prompt_tokens=9, num_cached_tokens=0, num_output_tokens=3, seed=0)
    [event] = closing_events(broken, Usage())
    assert (event.type, event.error.type) == ("error", "api_error")
    finished = closing_events(replace(broken, finish_reason="length"), Usage())
    assert [e.type for e in finished] == ["content_block_stop", "message_delta", "message_stop"]
