"""AsyncEngine: concurrent streams, early exit aborts, refusals, and a stopped engine."""

from __future__ import annotations

import asyncio

import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.request import Request, SamplingParams

CONFIG = EngineConfig(max_model_len=128, max_num_seqs=8, max_num_batched_tokens=64, page_size=4, num_pages=300)


@pytest.fixture(scope="module")
def async_engine(tiny_engine_factory):
    engine = AsyncEngine(tiny_engine_factory(CONFIG))
    engine.start()
    yield engine
    engine.stop()


async def collect(async_engine, request):
    return [output async for output in async_engine.generate(request)]


def greedy(request_id, prompt, max_tokens=10):
    return Request(request_id, prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))


def test_concurrent_streams_match_the_synchronous_engine(async_engine):
    requests = [greedy(f"a{i}", [i + 1, 7, 9, 11 + i], max_tokens=6 + i) for i in range(6)]

    async def run_all():
        return await asyncio.gather(*(collect(async_engine, r) for r in requests))

    streams = asyncio.run(run_all())
    for request, outputs in zip(requests, streams):
        assert outputs[-1].finish_reason == "length" and all(o.finish_reason is None for o in outputs[:-1])
        tokens = [t for o in outputs for t in o.new_token_ids]
        assert len(tokens) == request.sampling.max_tokens
    # Each request again on its own, one after another: the same tokens as when concurrent.
    # (Through the async engine: its thread owns the Engine, so the test never touches it.)
    for i, (request, outputs) in enumerate(zip(requests, streams)):
        alone = asyncio.run(collect(async_engine, greedy(f"s{i}", request.prompt_token_ids,
                                                         request.sampling.max_tokens)))
        assert [t for o in alone for t in o.new_token_ids] == [t for o in outputs for t in o.new_token_ids]


def test_leaving_a_stream_early_aborts_it_and_frees_its_pages(async_engine):
    block_manager = async_engine.engine.block_manager
    free_before = block_manager.num_free_pages

    async def take_two():
        stream = async_engine.generate(greedy("early", [1, 2, 3], max_tokens=100))
        outputs = [await anext(stream), await anext(stream)]
        await stream.aclose()
        for _ in range(100):  # the abort is applied on the engine thread's next turn
            if block_manager.num_free_pages == free_before:
                break
            await asyncio.sleep(0.02)
        return outputs

    outputs = asyncio.run(take_two())
    assert len(outputs) == 2 and not outputs[-1].finished
    assert block_manager.num_free_pages == free_before


def test_a_request_that_cannot_be_served_raises_at_once(async_engine):
    with pytest.raises(ValueError, match="empty"):
        asyncio.run(collect(async_engine, greedy("empty", [])))
    assert async_engine.is_alive


def test_duplicate_ids_are_refused(async_engine):
    async def both():
        first = asyncio.create_task(collect(async_engine, greedy("dup", [1, 2], max_tokens=30)))
        await asyncio.sleep(0)
        with pytest.raises(ValueError, match="already in use"):
            await collect(async_engine, greedy("dup", [1, 2]))
        return await first

    assert len([t for o in asyncio.run(both()) for t in o.new_token_ids]) == 30
