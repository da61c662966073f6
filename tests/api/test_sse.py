"""SSE framing: `data: <json>` and a blank line per event, `data: [DONE]` last."""

from __future__ import annotations

import asyncio

import pytest

from api.core.sse import DONE_EVENT, encode_event, prefetched, sse_frames
from generated.fireworks_completions import CompletionResponseStreamChoice, CompletionStreamResponse


def collect(frames):
    async def run():
        return [frame async for frame in frames]
    return asyncio.run(run())


async def items(*values, fail_after: int | None = None):
    for index, value in enumerate(values):
        if fail_after is not None and index == fail_after:
            raise RuntimeError("broken")
        yield value


def test_events_are_framed_byte_for_byte():
    chunk = CompletionStreamResponse(id="c1", object="text_completion", created=7, model="m",
                                     choices=[CompletionResponseStreamChoice(index=0, text="hé\n", finish_reason=None)])
    frames = collect(sse_frames(items(chunk, {"a": [1, 2]})))
    assert frames == [
        b'data: {"id":"c1","object":"text_completion","created":7,"model":"m","choices":'
        b'[{"index":0,"text":"h\xc3\xa9\\n","finish_reason":null}]}\n\n',
        b'data: {"a":[1,2]}\n\n',
        b"data: [DONE]\n\n",
    ]
    assert DONE_EVENT == b"data: [DONE]\n\n"


def test_unset_fields_are_left_out_and_set_nulls_kept():
    choice = CompletionResponseStreamChoice(index=1, text="", logprobs=None)
    assert encode_event(choice) == b'data: {"index":1,"text":"","logprobs":null}\n\n'


def test_prefetch_raises_before_the_stream_starts():
    async def run():
        with pytest.raises(RuntimeError):
            await prefetched(items("a", fail_after=0))
        stream = await prefetched(items("a", "b"))
        return [value async for value in stream]
    assert asyncio.run(run()) == ["a", "b"]


def test_prefetch_closes_the_source_when_closed_early():
    closed = []

    async def source():
        try:
            for value in range(10):
                yield value
        finally:
            closed.append(True)

    async def run():
        stream = await prefetched(source())
        assert await anext(stream) == 0
        await stream.aclose()
    asyncio.run(run())
    assert closed == [True]
