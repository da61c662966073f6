"""Streamed responses on the tiny-model app: event order and numbering, text, the final
status, obfuscation, storing, and failures."""

from __future__ import annotations

import pytest

from generated.flint import ResponseStreamEvent
from responses_helpers import URL, body, create, output_text, stream
from test_chat_stream import break_engine

OPENING = ["response.created", "response.in_progress", "response.output_item.added",
           "response.content_part.added"]
CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


def test_stream_events_arrive_in_order_and_match_the_response(client):
    whole = create(client, max_output_tokens=8)
    events = stream(client, max_output_tokens=8)
    for event in events:
        ResponseStreamEvent.model_validate(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    deltas = types[len(OPENING):-len(CLOSING) - 1]
    assert types[:len(OPENING)] == OPENING and types[-len(CLOSING) - 1:-1] == CLOSING
    assert deltas and set(deltas) == {"response.output_text.delta"}
    final = events[-1]["response"]
    assert events[-1]["type"] == {"completed": "response.completed",
                                  "incomplete": "response.incomplete"}[whole["status"]]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == output_text(whole) == output_text(final) == events[-4]["text"]
    assert final["status"] == whole["status"] and final["usage"] == whole["usage"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    message_id = events[2]["item"]["id"]
    assert events[2]["item"]["status"] == "in_progress" and events[2]["item"]["content"] == []
    assert all(e["item_id"] == message_id for e in events if "item_id" in e)
    assert final["output"][0] == events[-2]["item"] and final["output"][0]["id"] == message_id
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1


def test_a_stream_cut_by_max_output_tokens_ends_incomplete(client):
    events = stream(client, max_output_tokens=2)
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 2 and events[-2]["item"]["status"] == "incomplete"


def test_a_streamed_response_is_stored_as_its_final_event_says(client):
    events = stream(client)
    final = events[-1]["response"]
    assert client.get(f"{URL}/{final['id']}").json() == final


def test_obfuscation_pads_deltas_unless_turned_off(client):
    padded = [e for e in stream(client) if e["type"] == "response.output_text.delta"]
    assert all(isinstance(e["obfuscation"], str) and e["obfuscation"] for e in padded)
    assert len({e["obfuscation"] for e in padded}) > 1
    plain = stream(client, stream_options={"include_obfuscation": False})
    assert all("obfuscation" not in e for e in plain)


def test_streamed_logprobs_match_the_whole_response(client):
    fields = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    whole = create(client, **fields)["output"][0]["content"][0]["logprobs"]
    events = stream(client, **fields)
    streamed = [entry for e in events if e["type"] == "response.output_text.delta" for entry in e["logprobs"]]
    assert [e["bytes"] for e in streamed] == [e["bytes"] for e in whole]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in whole], abs=1e-4)
    assert events[-1]["response"]["output"][0]["content"][0]["logprobs"] == streamed


def test_an_answer_that_breaks_off_ends_with_response_failed(client, monkeypatch):
    break_engine(client, monkeypatch, after_outputs=1)
    events = stream(client)
    assert [e["type"] for e in events[:len(OPENING)]] == OPENING
    failed = events[-1]
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "server_error"
    assert client.get(f"{URL}/{failed['response']['id']}").status_code == 404  # never stored
    whole = client.post(URL, json=body())  # retryable, as every dialect answers a generation cut off
    assert whole.status_code == 503 and whole.json()["error"]["code"] == "cut_off"


def test_a_stream_refused_before_its_first_output_is_an_http_error(client, monkeypatch):
    break_engine(client, monkeypatch, after_outputs=0)
    response = client.post(URL, json=body(stream=True))
    assert response.status_code == 400 and "refuses" in response.json()["error"]["message"]
