"""Streamed chat completions on the tiny-model app: chunk order, usage chunk, obfuscation."""

from __future__ import annotations

from contextlib import aclosing

import pytest

from chat_helpers import URL, body, chat, stream
from engine.async_engine import EngineDeadError
from generated.openai_chat_completions import ChatCompletionChunk


def choice_chunks(chunks: list[dict], index: int) -> list[dict]:
    return [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index]


def test_stream_chunks_arrive_in_order_and_match_the_reply(client):
    whole = chat(client, max_completion_tokens=8)["choices"][0]
    chunks = stream(client, max_completion_tokens=8)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    assert len({(c["id"], c["created"], c["model"], c["object"]) for c in chunks}) == 1
    parts = choice_chunks(chunks, 0)
    assert parts[0]["delta"] == {"role": "assistant", "content": ""}
    middle, last = parts[1:-1], parts[-1]
    assert middle and all(set(p["delta"]) == {"content"} and p["finish_reason"] is None for p in middle)
    assert last == {"index": 0, "delta": {}, "finish_reason": whole["finish_reason"], "logprobs": None}
    assert "".join(p["delta"]["content"] for p in middle) == whole["message"]["content"]
    assert all("usage" not in c for c in chunks)


def test_every_choice_streams_its_role_first_and_its_finish_last(client):
    chunks = stream(client, n=2, seed=3, temperature=1.0)
    replies = chat(client, n=2, seed=3, temperature=1.0)["choices"]
    for index in (0, 1):
        parts = choice_chunks(chunks, index)
        assert parts[0]["delta"]["role"] == "assistant"
        assert [p["finish_reason"] is not None for p in parts] == [False] * (len(parts) - 1) + [True]
        assert "".join(p["delta"].get("content", "") for p in parts) == replies[index]["message"]["content"]


def test_include_usage_adds_a_last_usage_chunk(client):
    whole = chat(client)
    chunks = stream(client, stream_options={"include_usage": True})
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert choice_chunks(chunks, 0)[-1]["finish_reason"] is not None


def test_obfuscation_pads_chunks_unless_turned_off(client):
    padded = stream(client)
    assert all(isinstance(c["obfuscation"], str) and c["obfuscation"] for c in padded)
    assert len({c["obfuscation"] for c in padded}) > 1
    plain = stream(client, stream_options={"include_obfuscation": False})
    assert all("obfuscation" not in c for c in plain)


def test_streamed_logprobs_match_the_whole_reply(client):
    whole = chat(client, logprobs=True, top_logprobs=2)["choices"][0]["logprobs"]["content"]
    chunks = stream(client, logprobs=True, top_logprobs=2)
    streamed = [entry for part in choice_chunks(chunks, 0) if part.get("logprobs")
                for entry in part["logprobs"]["content"]]
    assert [e["bytes"] for e in streamed] == [e["bytes"] for e in whole]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in whole], abs=1e-4)
    assert all(len(e["top_logprobs"]) == 2 for e in streamed)


def break_engine(client, monkeypatch, after_outputs: int) -> None:
    """Make the app's engine fail a request after `after_outputs` outputs."""
    engine = client.app.state.server.running_engine
    original = engine.generate

    async def failing(request):
        if after_outputs == 0:
            raise ValueError("the engine refuses this request")
        async with aclosing(original(request)) as outputs:
            async for output in outputs:
                yield output
                raise EngineDeadError("the engine stopped")

    monkeypatch.setattr(engine, "generate", failing)


def test_a_reply_that_breaks_off_ends_with_an_error(client, monkeypatch):
    break_engine(client, monkeypatch, after_outputs=1)
    chunks = stream(client)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["error"]["code"] == "cut_off"
    whole = client.post(URL, json=body())  # retryable, as every dialect answers a generation cut off
    assert whole.status_code == 503 and whole.json()["error"]["code"] == "cut_off"


def test_a_stream_refused_before_its_first_output_is_an_http_error(client, monkeypatch):
    break_engine(client, monkeypatch, after_outputs=0)
    response = client.post(URL, json=body(stream=True))
    assert response.status_code == 400 and "refuses" in response.json()["error"]["message"]


def test_continuous_usage_stats_counts_in_every_chunk(client):
    """vLLM's stream option: every chunk carries the usage so far, growing with the answer,
    and the last chunk the totals, as with include_usage."""
    whole = chat(client, max_completion_tokens=5, seed=3, ignore_eos=True)
    chunks = stream(client, max_completion_tokens=5, seed=3, ignore_eos=True,
                    stream_options={"continuous_usage_stats": True})
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert all(c["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"] for c in chunks)
    assert counts == sorted(counts) and counts[0] >= 1 and len(set(counts)) > 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
