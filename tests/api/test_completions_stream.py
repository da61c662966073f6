"""Streamed /v1/completions on the tiny-model app: chunk shapes, usage chunk, merging choices."""

from __future__ import annotations

import asyncio
import logging

import pytest

from completions_helpers import complete, server_state, stream_events
from engine.async_engine import EngineDeadError
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


def test_a_stop_string_ends_the_stream_in_the_engine_with_no_abort_and_its_pages_free(client, monkeypatch):
    """The engine's output stage finds the stop string and finishes the sequence in that
    step: nothing travels back to abort it, and its KV pages are free before the client
    hears of the end."""
    engine = server_state(client).running_engine.engine
    body = {"prompt": "Stop strings are", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    reference = complete(client, **body)["choices"][0]["text"]
    stop = reference[len(reference) // 2: len(reference) // 2 + 3]  # spans the middle of the text
    assert stop and stop in reference
    free_before = engine.block_manager.num_free_pages
    aborts = []
    original_abort = engine.abort
    monkeypatch.setattr(engine, "abort", lambda request_id: aborts.append(request_id) or original_abort(request_id))
    events = stream_events(client, **body, stop=[stop])
    assert engine.block_manager.num_free_pages == free_before
    assert aborts == []
    choices = [event["choices"][0] for event in events]
    assert "".join(c["text"] for c in choices) == reference[: reference.index(stop)]
    assert choices[-1]["finish_reason"] == "stop"


def test_raw_output_comes_with_a_streamed_choices_last_chunk(client):
    body = {"prompt": "Raw output", "max_tokens": 5, "temperature": 0, "ignore_eos": True, "raw_output": True,
            "return_token_ids": True}
    whole = complete(client, **body)["choices"][0]
    events = stream_events(client, **body)
    choices = [event["choices"][0] for event in events]
    assert all("raw_output" not in choice for choice in choices[:-1])
    raw = choices[-1]["raw_output"]
    assert raw == whole["raw_output"]
    assert raw["completion_token_ids"] == [t for c in choices for t in c["token_ids"]]


def test_a_failure_after_the_stream_began_ends_it_with_an_error_event(client, monkeypatch):
    """Choice 0 streams; choice 1's engine request fails before its first output. The status
    line is sent already, so the failure arrives as an error event, then [DONE]."""
    engine = server_state(client).running_engine
    original = engine.generate

    async def dying_later(request):
        await asyncio.sleep(0.5)  # after choice 0's first output
        raise EngineDeadError("the engine stopped")
        yield  # an async generator, as AsyncEngine.generate is

    def failing_second_choice(request):
        return dying_later(request) if request.request_id.endswith("-1") else original(request)

    monkeypatch.setattr(engine, "generate", failing_second_choice)
    events = stream_events(client, prompt="Two choices", n=2, max_tokens=3, seed=1, ignore_eos=True)
    assert events[0]["choices"][0]["index"] == 0  # the stream had begun
    assert events[-1]["error"]["code"] == "failed" and events[-1]["error"]["type"] == "service_unavailable"
    assert server_state(client).num_admitted_choices == 0


def test_an_unexpected_failure_inside_a_choice_is_logged_and_answered(client, monkeypatch, caplog):
    engine = server_state(client).running_engine

    def broken(request):
        raise KeyError("a bug inside the generation")

    monkeypatch.setattr(engine, "generate", broken)
    with caplog.at_level(logging.ERROR, logger="flint"):
        response = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert response.status_code == 500 and response.json()["error"]["type"] == "server_error"
    assert any(record.exc_info and isinstance(record.exc_info[1], KeyError) for record in caplog.records)


def test_continuous_usage_stats_counts_in_every_chunk(client):
    """vLLM's stream option: every chunk carries the usage so far, and the last the totals."""
    body = {"prompt": "one", "max_tokens": 12, "seed": 5, "ignore_eos": True, "logprobs": 0}
    whole = complete(client, **body)
    events = stream_events(client, **body, stream_options={"continuous_usage_stats": True})
    streamed = 0
    for event in events[:-1]:  # each chunk's count: the tokens streamed up to it
        streamed += len(event["choices"][0]["logprobs"]["tokens"])
        assert event["usage"]["completion_tokens"] == streamed
    assert streamed == 12 and events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]
