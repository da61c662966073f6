"""engine/host/scheduler.py: continuous batching, chunked prefill, preemption, abort.

A fake step loop stands in for the runner and engine: it writes a fake KV store (each slot
holds an identity of the token's whole prefix), checks that every computed token reads back
right, samples a dummy token whenever one is due, and finishes sequences at max_tokens.
"""

from __future__ import annotations

import random

import pytest
from kv_identity import prefix_ids

from engine.config import EngineConfig
from engine.host.block_manager import BlockManager
from engine.host.request import SamplingParams, StopCriteria
from engine.host.scheduled import SchedulerOutput
from engine.host.scheduler import Scheduler
from engine.host.sequence import Sequence, SequenceStatus


def make_scheduler(**config) -> Scheduler:
    config = EngineConfig(**config)
    manager = BlockManager(config.num_pages, config.page_size, config.enable_prefix_caching)
    return Scheduler(config, manager)


def make_seq(request_id: str, token_ids: list[int], max_tokens: int = 16) -> Sequence:
    return Sequence(request_id, token_ids, SamplingParams(), seed=0, stop=StopCriteria(max_tokens=max_tokens))


class FakeEngine:
    """Drives a scheduler the way the engine will, checking its invariants every step."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.kv: dict[int, int] = {}
        self.outputs: list[SchedulerOutput] = []

    def step(self) -> SchedulerOutput:
        scheduler = self.scheduler
        running_before = list(scheduler.running)
        output = scheduler.schedule()
        self.check_budgets(output)
        self.check_preemptions(output, running_before)
        self.write_and_read_kv(output)
        tokens = [item.seq.num_tokens % 7 for item in output.sampled]
        for seq in scheduler.update(output, tokens):
            if seq.num_output_tokens >= seq.stop.max_tokens:
                scheduler.finish(seq, "length")
        self.outputs.append(output)
        return output

    def run(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_unfinished:
                return
            self.step()
        raise AssertionError("the sequences never finished")

    def check_budgets(self, output: SchedulerOutput) -> None:
        scheduler = self.scheduler
        assert 0 < output.num_batched_tokens <= scheduler.max_num_batched_tokens
        assert len(output.scheduled) <= scheduler.max_num_seqs
        assert scheduler.num_running <= scheduler.max_num_seqs
        assert len({id(item.seq) for item in output.scheduled}) == len(output.scheduled)
        for item in output.scheduled:
            assert item.seq.status is SequenceStatus.RUNNING and item.num_new_tokens > 0
            assert item.start + item.num_new_tokens <= item.seq.num_tokens
            assert item.needs_sample == (item.start + item.num_new_tokens == item.seq.num_tokens)

    def check_preemptions(self, output: SchedulerOutput, running_before: list[Sequence]) -> None:
        """Victims are the most recently admitted, and never in a step that admits anyone."""
        num_preempted = len(output.preempted)
        if num_preempted:
            assert output.preempted == running_before[::-1][:num_preempted]
            newly_admitted = [item for item in output.scheduled if item.seq not in running_before]
            assert not newly_admitted
        for seq in output.preempted:
            assert seq.status is SequenceStatus.WAITING and seq.block_table == []
            assert seq.num_computed_tokens == 0

    def write_and_read_kv(self, output: SchedulerOutput) -> None:
        page_size = self.scheduler.block_manager.page_size
        for item in output.scheduled:
            ids, table = prefix_ids(item.seq.token_ids), item.seq.block_table
            for position in range(item.start, item.start + item.num_new_tokens):
                self.kv[table[position // page_size] * page_size + position % page_size] = ids[position]
        for item in output.scheduled:  # attention reads every token up to the chunk's end
            ids, table = prefix_ids(item.seq.token_ids), item.seq.block_table
            assert 0 not in table
            for position in range(item.start + item.num_new_tokens):
                slot = table[position // page_size] * page_size + position % page_size
                assert self.kv[slot] == ids[position], f"{item.seq} reads wrong KV at {position}"


def assert_no_page_leaks(scheduler: Scheduler) -> None:
    manager = scheduler.block_manager
    assert manager.num_free_pages == manager.num_pages - 1 and manager.usage == 0.0
    assert all(manager.ref_count(page) == 0 for page in range(manager.num_pages))


def test_long_prompt_is_prefilled_in_chunks_alongside_a_decode():
    scheduler = make_scheduler(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=1100)
    engine = FakeEngine(scheduler)
    decode = make_seq("decode", [1, 2, 3, 4], max_tokens=100)
    scheduler.add(decode)
    engine.step()
    scheduler.add(make_seq("long", list(range(1000)), max_tokens=5))
    chunks = []
    for _ in range(4):
        output = engine.step()
        assert [item.seq.request_id for item in output.scheduled] == ["decode", "long"]
        assert output.scheduled[0].num_new_tokens == 1 and output.scheduled[0].needs_sample
        chunks.append(output.scheduled[1])
        assert output.num_batched_tokens <= 256
    assert [chunk.start for chunk in chunks] == [0, 255, 510, 765]
    assert [chunk.num_new_tokens for chunk in chunks] == [255, 255, 255, 235]
    assert [chunk.needs_sample for chunk in chunks] == [False, False, False, True]
    assert chunks[-1].seq.num_output_tokens == 1
    engine.run()
    assert_no_page_leaks(scheduler)


def test_budgets_limit_sequences_and_tokens_every_step():
    scheduler = make_scheduler(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=128,
                               num_pages=64, page_size=8)
    engine = FakeEngine(scheduler)
    seqs = [make_seq(f"r{i}", [i] * (10 + 7 * i), max_tokens=6) for i in range(10)]
    for seq in seqs:
        scheduler.add(seq)
    output = engine.step()
    assert [item.seq.request_id for item in output.scheduled] == ["r0", "r1", "r2", "r3"]
    assert output.num_batched_tokens == 10 + 17 + 24 + 13  # r3's prompt is chunked to fit
    engine.run()
    assert all(seq.num_output_tokens == 6 and seq.finish_reason == "length" for seq in seqs)
    assert max(len(output.scheduled) for output in engine.outputs) == 4
    assert_no_page_leaks(scheduler)


@pytest.mark.parametrize("enable_prefix_caching", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_many_sequences_through_a_tiny_cache(seed, enable_prefix_caching):
    rng = random.Random(seed)
    scheduler = make_scheduler(max_num_batched_tokens=32, max_num_seqs=8, max_model_len=40,
                               page_size=4, num_pages=13, enable_prefix_caching=enable_prefix_caching)
    engine = FakeEngine(scheduler)
    shared = [[rng.randrange(7) for _ in range(rng.randrange(1, 12))] for _ in range(3)]
    seqs = []
    for i in range(32):
        prompt = rng.choice(shared) + [rng.randrange(7) for _ in range(rng.randrange(1, 10))]
        seqs.append(make_seq(f"r{i}", prompt, max_tokens=rng.randrange(1, 40 - len(prompt) + 1)))
    for seq in seqs[:16]:
        scheduler.add(seq)
    for _ in range(5):
        engine.step()
    for seq in seqs[16:]:  # more arrive mid-flight
        scheduler.add(seq)
    engine.run()
    assert all(seq.num_output_tokens == seq.stop.max_tokens for seq in seqs)
    assert all(seq.is_finished and seq.block_table == [] for seq in seqs)
    assert sum(len(output.preempted) for output in engine.outputs) > 0  # the cache was tight
    assert_no_page_leaks(scheduler)


def test_an_arriving_request_never_preempts_a_running_one():
    scheduler = make_scheduler(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=32,
                               page_size=4, num_pages=9)  # 8 usable pages
    engine = FakeEngine(scheduler)
    old = make_seq("old", list(range(10)), max_tokens=20)  # 3 pages, growing one every 4 steps
    scheduler.add(old)
    engine.step()
    big = make_seq("big", list(range(50, 70)), max_tokens=4)  # 5 pages: fills the cache
    scheduler.add(big)
    output = engine.step()
    assert [item.seq.request_id for item in output.scheduled] == ["old", "big"]
    assert scheduler.block_manager.num_free_pages == 0
    engine.run()
    assert all(old not in output.preempted for output in engine.outputs)
    assert any(big in output.preempted for output in engine.outputs)
    assert old.num_output_tokens == 20 and big.num_output_tokens == 4
    assert_no_page_leaks(scheduler)


def test_admission_waits_for_pages_instead_of_taking_them_from_running():
    scheduler = make_scheduler(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=32,
                               page_size=4, num_pages=9)
    engine = FakeEngine(scheduler)
    scheduler.add(make_seq("a", list(range(24)), max_tokens=3))  # 6 of the 8 pages
    engine.step()
    scheduler.add(make_seq("b", list(range(100, 112)), max_tokens=2))  # needs 3
    output = engine.step()
    assert [item.seq.request_id for item in output.scheduled] == ["a"]
    assert scheduler.num_waiting == 1 and not output.preempted
    engine.run()
    assert_no_page_leaks(scheduler)


def test_preempted_sequence_is_recomputed_with_its_outputs():
    scheduler = make_scheduler(max_num_batched_tokens=64, max_num_seqs=2, max_model_len=32,
                               page_size=4, num_pages=9)
    engine = FakeEngine(scheduler)
    old = make_seq("old", list(range(12)), max_tokens=16)
    young = make_seq("young", [9] * 8 + [1, 2, 3, 4, 5, 6, 7], max_tokens=8)
    queued = make_seq("queued", [5, 5, 5], max_tokens=2)  # waits: max_num_seqs is 2
    for seq in (old, young, queued):
        scheduler.add(seq)
    first = engine.step()
    assert young.num_cached_tokens == 0
    while not first.preempted:
        first = engine.step()
    assert first.preempted == [young]
    assert young.status is SequenceStatus.WAITING and list(scheduler.waiting) == [young, queued]
    outputs = list(young.output_token_ids)
    assert outputs and young.num_tokens == 15 + len(outputs)

    resumed = None
    while resumed is None:
        output = engine.step()
        resumed = next((item for item in output.scheduled if item.seq is young), None)
    # Recomputed from its cached full pages (if any survived) up to prompt + outputs, after
    # which the step samples its next token; FakeEngine checks the recomputed KV.
    assert resumed.start % 4 == 0 and resumed.needs_sample
    assert resumed.start + resumed.num_new_tokens == 15 + len(outputs)
    assert young.token_ids[: 15 + len(outputs)] == young.prompt_token_ids + outputs
    engine.run()
    assert young.num_output_tokens == 8 and young.num_preemptions >= 1
    assert young.num_cached_tokens == 0  # usage reports the first admission's cache hits
    assert_no_page_leaks(scheduler)


def test_the_newest_running_sequence_shrinks_its_chunk_before_being_preempted():
    scheduler = make_scheduler(max_num_batched_tokens=16, max_num_seqs=2, max_model_len=40,
                               page_size=4, num_pages=11)  # 10 usable pages
    engine = FakeEngine(scheduler)
    a, b = make_seq("a", list(range(8)), max_tokens=30), make_seq("b", list(range(100, 130)), max_tokens=10)
    scheduler.add(a)
    scheduler.add(b)
    engine.step()  # a: 8 tokens, b: 8
    engine.step()  # a: 1, b: 15 tokens; one page left
    output = engine.step()  # b's last 7 tokens need 2 pages: it computes the 5 that fit
    assert not output.preempted
    assert [(item.seq, item.num_new_tokens) for item in output.scheduled] == [(a, 1), (b, 5)]
    assert engine.step().preempted == [b]  # not one more token fits
    engine.run()
    assert_no_page_leaks(scheduler)


def test_prefix_cache_hits_are_reported_at_first_admission():
    scheduler = make_scheduler(max_num_batched_tokens=512, max_num_seqs=4, page_size=16)
    engine = FakeEngine(scheduler)
    prefix = list(range(1000, 1256))
    scheduler.add(make_seq("first", prefix + [1], max_tokens=2))
    engine.run()
    second = make_seq("second", prefix + [2, 3], max_tokens=2)
    scheduler.add(second)
    output = engine.step()
    assert second.num_cached_tokens == 256
    assert output.scheduled[0].start == 256 and output.scheduled[0].num_new_tokens == 2
    engine.run()
    assert_no_page_leaks(scheduler)


@pytest.mark.parametrize("running", [True, False])
def test_abort_frees_pages(running):
    scheduler = make_scheduler(max_num_batched_tokens=64, max_num_seqs=1, page_size=4)
    engine = FakeEngine(scheduler)
    first, second = make_seq("first", list(range(30))), make_seq("second", list(range(9)))
    scheduler.add(first)
    scheduler.add(second)
    engine.step()
    target = first if running else second
    assert scheduler.abort(target.request_id) is target
    assert target.finish_reason == "abort" and target.is_finished and target.block_table == []
    assert scheduler.abort(target.request_id) is None
    scheduler.finish(target, "stop")
    assert target.finish_reason == "abort"
    assert scheduler.num_running + scheduler.num_waiting == 1
    scheduler.abort((second if running else first).request_id)
    assert not scheduler.has_unfinished
    assert_no_page_leaks(scheduler)


def test_update_skips_a_sequence_aborted_during_the_step():
    scheduler = make_scheduler(max_num_batched_tokens=64, max_num_seqs=4, page_size=4)
    a, b = make_seq("a", [1, 2, 3]), make_seq("b", [4, 5])
    scheduler.add(a)
    scheduler.add(b)
    output = scheduler.schedule()
    scheduler.abort("a")
    assert scheduler.update(output, [7, 8]) == [b]
    assert b.output_token_ids == [8] and a.output_token_ids == []
    with pytest.raises(ValueError):
        scheduler.update(scheduler.schedule(), [])

