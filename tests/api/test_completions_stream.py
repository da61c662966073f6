"""Streamed /v1/completions on the tiny-model app: chunk shapes, usage chunk, merging choices."""

from __future__ import annotations

import pytest

from completions_helpers import complete, stream_events
from generated import fireworks_completions, fireworks_streaming


def test_stream_carries_the_same_text_as_the_response(client):
    body = {"prompt": "Streaming is", "max_tokens": 6, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    whole = complete(client, **body)["choices"][0]
    events = stream_events(client, **body)
    for event in events:  # both specs' chunk shapes
        fireworks_completions.CompletionStreamResponse.model_validate(event)
        fireworks_streaming.CompletionStreamResponse.model_validate(event)
    choices = [event["choices"][0] for event in events]
    assert "".join(c["text"] for c in choices) == whole["text"]
    assert [t for c in choices for t in c["token_ids"]] == whole["token_ids"]
    assert choices[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in choices[1:])
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
    assert len({event["id"] for event in events}) == 1
    assert all("usage" not in event for event in events)  # not asked for


def test_include_usage_adds_a_final_usage_chunk(client):
    body = {"prompt": ["one", "two words"], "n": 2, "max_tokens": 3, "seed": 5, "ignore_eos": True}
    whole = complete(client, **body)
    events = stream_events(client, **body, stream_options={"include_usage": True})
    assert events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]
    assert all("usage" not in event for event in events[:-1])
    # Every choice of every prompt streams under its index, seeded as the whole response.
    texts = {}
    for event in events[:-1]:
        (choice,) = event["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert texts == {c["index"]: c["text"] for c in whole["choices"]}
    off = client.post("/v1/completions", json={**body, "stream_options": {"include_usage": False}, "stream": True})
    assert '"usage"' not in off.text


def test_echo_and_logprobs_come_in_a_choices_first_chunk(client):
    body = {"prompt": "Echo me", "max_tokens": 3, "temperature": 0, "echo": True, "logprobs": 1}
    whole = complete(client, **body)["choices"][0]
    events = stream_events(client, **body)
    first = events[0]["choices"][0]
    assert first["text"].startswith("Echo me")
    streamed = [lp for e in events for lp in e["choices"][0]["logprobs"]["token_logprobs"]]
    expected = whole["logprobs"]["token_logprobs"]
    assert streamed[0] is None and expected[0] is None and streamed[1:] == pytest.approx(expected[1:])
    offsets = [o for e in events for o in e["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == whole["logprobs"]["text_offset"]
