"""AsyncEngine: concurrent streams, early exit aborts, refusals, and an engine thread that dies."""

from __future__ import annotations

import asyncio
import threading

import pytest
from shared_configs import SIXTEEN_SEQUENCES

from engine.async_engine import AsyncEngine, EngineDeadError
from engine.host.request import Request, SamplingParams, StopCriteria

CONFIG = SIXTEEN_SEQUENCES


@pytest.fixture(scope="module")
def async_engine(tiny_engine_factory):
    engine = AsyncEngine(tiny_engine_factory(CONFIG))
    engine.start()
    yield engine
    engine.stop()


async def collect(async_engine, request):
    return [output async for output in async_engine.generate(request)]


def greedy(request_id, prompt, max_tokens=10):
    return Request(request_id, prompt, SamplingParams(temperature=0.0),
                   StopCriteria(max_tokens=max_tokens, ignore_eos=True))


def test_concurrent_streams_match_the_synchronous_engine(async_engine):
    requests = [greedy(f"a{i}", [i + 1, 7, 9, 11 + i], max_tokens=6 + i) for i in range(6)]

    async def run_all():
        return await asyncio.gather(*(collect(async_engine, r) for r in requests))

    streams = asyncio.run(run_all())
    for request, outputs in zip(requests, streams):
        assert outputs[-1].finish_reason == "length" and all(o.finish_reason is None for o in outputs[:-1])
        tokens = [t for o in outputs for t in o.new_token_ids]
        assert len(tokens) == request.stop.max_tokens
    # Each request again on its own, one after another: the same tokens as when concurrent.
    # (Through the async engine: its thread owns the Engine, so the test never touches it.)
    for i, (request, outputs) in enumerate(zip(requests, streams)):
        alone = asyncio.run(collect(async_engine, greedy(f"s{i}", request.prompt_token_ids,
                                                         request.stop.max_tokens)))
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


async def outputs_until_death(async_engine, request):
    """The outputs `request` streamed, and the EngineDeadError that ended them (None if none)."""
    outputs = []
    try:
        async for output in async_engine.generate(request):
            outputs.append(output)
    except EngineDeadError as error:
        return outputs, error
    return outputs, None


# A ValueError too: a collective that fails may raise one, and it is no refusal of the request.
@pytest.mark.parametrize("fault", [RuntimeError("injected fault"), ValueError("a device error")], ids=["runtime", "value"])
def test_a_failing_step_ends_every_stream_and_reports_the_death(tiny_engine_factory, monkeypatch, fault):
    engine = tiny_engine_factory(CONFIG)
    collect_results, calls = engine.runner.collect, []

    def collect_failing_on_the_fourth_call(flight):  # where a device error would surface
        calls.append(len(flight.rows))
        if len(calls) == 4:
            raise fault
        return collect_results(flight)

    monkeypatch.setattr(engine.runner, "collect", collect_failing_on_the_fourth_call)
    deaths, died = [], threading.Event()

    def on_death(error):
        deaths.append(error)
        died.set()

    async_engine = AsyncEngine(engine, on_death=on_death)
    async_engine.start()
    try:
        async def run_all():
            requests = [greedy(f"doomed-{i}", [i + 1, 2, 3], max_tokens=50) for i in range(3)]
            return await asyncio.gather(*(outputs_until_death(async_engine, r) for r in requests))

        results = asyncio.run(asyncio.wait_for(run_all(), 60))
        assert len(calls) == 4
        for outputs, error in results:
            assert isinstance(error, EngineDeadError) and error.__cause__ is fault
            assert not any(output.finished for output in outputs)
        assert died.wait(10) and deaths == [fault]
        assert not async_engine.is_alive
        with pytest.raises(EngineDeadError):  # at once: a wait would time out instead
            asyncio.run(asyncio.wait_for(collect(async_engine, greedy("late", [1, 2])), 5))
        assert deaths == [fault]
    finally:
        async_engine.stop()


class DyingEngine:
    """Just enough of an Engine for the thread: an abort kills it, and `validate` runs a
    hook, which lets a test act between generate's first check and its stream's registration."""

    def __init__(self):
        self.on_validate = lambda: None
        self.residency = self  # never asleep

    def require_awake(self):
        pass

    def validate(self, request):
        self.on_validate()

    def has_unfinished(self):
        return False

    def add_request(self, request):
        pass

    def step(self):
        return []

    def abort(self, request_id):
        raise RuntimeError("injected fault")


def test_a_generate_racing_the_death_raises_instead_of_waiting_forever():
    engine, died = DyingEngine(), threading.Event()
    async_engine = AsyncEngine(engine, on_death=lambda error: died.set())
    async_engine.start()

    def die_now():  # the thread dies and hands its error to every stream registered so far
        async_engine.abort("anything")
        assert died.wait(5)

    engine.on_validate = die_now
    try:
        with pytest.raises(EngineDeadError):
            asyncio.run(asyncio.wait_for(collect(async_engine, greedy("racer", [1, 2])), 5))
    finally:
        async_engine.stop()


def test_the_heap_is_trimmed_once_each_time_the_engine_runs_out_of_work(async_engine, monkeypatch):
    """engine/host/heap.py: glibc's free pages go back to the system when the engine idles,
    once per busy spell, and not between its steps."""
    import platform

    import engine.async_engine as module
    from engine.host.heap import release_freed_memory

    trims = []
    monkeypatch.setattr(module, "release_freed_memory", lambda: trims.append(threading.get_ident()))

    async def two_spells():
        await asyncio.gather(collect(async_engine, greedy("t1", [1, 2], 8)), collect(async_engine, greedy("t2", [3], 5)))
        for _ in range(100):  # the thread trims after delivering the last output
            if trims:
                break
            await asyncio.sleep(0.01)
        first = len(trims)
        await collect(async_engine, greedy("t3", [4, 5], 3))
        for _ in range(100):
            if len(trims) > first:
                break
            await asyncio.sleep(0.01)
        return first

    assert asyncio.run(two_spells()) == 1 and len(trims) == 2
    assert trims[0] != threading.get_ident()  # on the engine thread
    assert release_freed_memory() == (platform.libc_ver()[0] == "glibc")


def test_a_settled_heap_keeps_what_the_load_left_out_of_the_collector_s_walks():
    """engine/host/heap.py settle_after_load: the objects alive after a load are frozen (no
    collection walks them again), and garbage is collected first, not frozen."""
    import gc
    import weakref

    from engine.host.heap import settle_after_load

    class Cycle:
        pass

    kept, garbage = Cycle(), Cycle()
    kept.me, garbage.me = kept, garbage
    collected = weakref.ref(garbage)
    del garbage
    gc.unfreeze()
    try:
        settle_after_load()
        assert collected() is None  # the cycle was collected, not frozen
        assert not any(item is kept for item in gc.get_objects())  # frozen: out of every generation
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
