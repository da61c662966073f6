"""engine/host/scheduler.py's service tiers: priority sequences are admitted ahead, take slots
and pages from default-tier ones at a full engine (computed in the very next step), are never
preempted for a default-tier one, and every page comes back."""

from __future__ import annotations

import random

import pytest

from engine.config import EngineConfig
from engine.host.block_manager import BlockManager
from engine.host.request import SamplingParams, StopCriteria
from engine.host.scheduled import SchedulerOutput
from engine.host.scheduler import Scheduler
from engine.host.sequence import Sequence, SequenceStatus


def make_scheduler(**config) -> Scheduler:
    config = EngineConfig(**config)
    return Scheduler(config, BlockManager(config.num_pages, config.page_size, config.enable_prefix_caching))


def make_seq(request_id: str, num_tokens: int, priority: bool = False, max_tokens: int = 8) -> Sequence:
    base = 1000 * (1 + sum(map(ord, request_id)))  # distinct prompts: no prefix-cache hits between them
    seq = Sequence(request_id, list(range(base, base + num_tokens)), SamplingParams(), seed=0,
                   stop=StopCriteria(max_tokens=max_tokens))
    seq.priority = priority
    return seq


def step(scheduler: Scheduler) -> SchedulerOutput:
    """One step of a fake engine: schedule, sample a dummy token where due, stop at max_tokens."""
    output = scheduler.schedule()
    for seq in scheduler.update(output, [7] * len(output.sampled)):
        if seq.num_output_tokens >= seq.stop.max_tokens:
            scheduler.finish(seq, "length")
    return output


def tiers_in_order(queue) -> bool:
    """Every priority sequence ahead of every default-tier one."""
    flags = [seq.priority for seq in queue]
    return flags == sorted(flags, reverse=True)


def check_no_leak(scheduler: Scheduler) -> None:
    manager = scheduler.block_manager
    assert not scheduler.has_unfinished
    assert manager.num_free_pages == manager.num_pages - 1
    assert all(manager.ref_count(page) == 0 for page in range(manager.num_pages))


def test_priority_is_admitted_ahead_of_earlier_default_requests():
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64, num_pages=64, max_model_len=256)
    d0, d1, p = make_seq("d0", 8), make_seq("d1", 8), make_seq("p", 8, priority=True)
    for seq in (d0, d1, p):
        scheduler.add(seq)
    output = step(scheduler)
    assert [item.seq for item in output.scheduled] == [p, d0]
    assert scheduler.running == [p, d0] and list(scheduler.waiting) == [d1]
    assert not output.preempted


@pytest.mark.parametrize("full", ["slots", "pages"])
def test_a_priority_request_at_a_full_engine_preempts_the_default_tier_and_runs_next_step(full):
    # Four default-tier prompts of 30 tokens fill 8 pages; with "slots" they also take every
    # sequence slot, with "pages" every page but no slot is left over.
    max_num_seqs = 4 if full == "slots" else 8
    scheduler = make_scheduler(max_num_seqs=max_num_seqs, max_num_batched_tokens=128, num_pages=9,
                               max_model_len=64, max_prefill_rows=4)
    defaults = [make_seq(f"d{i}", 30, max_tokens=2) for i in range(4)]
    for seq in defaults:
        scheduler.add(seq)
    step(scheduler)
    assert scheduler.running == defaults and scheduler.block_manager.num_free_pages == 0

    priority = make_seq("p", 20, priority=True, max_tokens=4)
    scheduler.add(priority)
    output = step(scheduler)
    first = output.scheduled[0]
    assert first.seq is priority and first.num_new_tokens == 20 and first.needs_sample  # its first token, now
    assert output.preempted == [defaults[-1]]  # the newest default-tier sequence, and only it
    assert scheduler.running[0] is priority and tiers_in_order(scheduler.waiting)

    while scheduler.has_unfinished:  # the default tier's work still completes
        step(scheduler)
    assert all(seq.finish_reason == "length" and seq.num_output_tokens == 2 for seq in defaults)
    assert priority.num_output_tokens == 4 and priority.num_preemptions == 0
    check_no_leak(scheduler)


def test_a_default_request_never_preempts_the_priority_tier():
    # Two priority sequences grow to 3 pages each, all 6 pages there are; a default-tier one
    # takes the third slot and a page they will need.
    scheduler = make_scheduler(max_num_seqs=3, max_num_batched_tokens=64, num_pages=7, max_model_len=64)
    priority = [make_seq(f"p{i}", 30, priority=True, max_tokens=4) for i in range(2)]
    for seq in priority:
        scheduler.add(seq)
    step(scheduler)
    late = make_seq("late", 4, max_tokens=4)
    scheduler.add(late)
    preempted = []
    while any(seq.status is not SequenceStatus.FINISHED for seq in priority):
        preempted += step(scheduler).preempted
    assert preempted and all(seq is late for seq in preempted)
    assert all(seq.num_preemptions == 0 for seq in priority)
    while scheduler.has_unfinished:
        step(scheduler)
    assert late.num_output_tokens == 4
    check_no_leak(scheduler)


def test_requeued_and_idle_sequences_keep_their_tier():
    scheduler = make_scheduler(max_num_seqs=4, max_num_batched_tokens=64, num_pages=64, max_model_len=256)
    p0, p1, d0, d1 = make_seq("p0", 4, True), make_seq("p1", 4, True), make_seq("d0", 4), make_seq("d1", 4)
    for seq in (d0, p0, d1, p1):
        scheduler.add(seq)
    assert list(scheduler.waiting) == [p0, p1, d0, d1]
    step(scheduler)
    assert scheduler.running == [p0, p1, d0, d1]
    scheduler.requeue(d0)  # a beam that lost its copy-on-write page
    scheduler.requeue(p1)
    assert list(scheduler.waiting) == [p1, d0] and scheduler.running == [p0, d1]
    # A forked beam stays beside its parent, in its tier.
    child = make_seq("p0-beam", 4, priority=True)
    scheduler.fork(p0, child)
    assert scheduler.running == [p0, child, d1]
    child2 = make_seq("d0-beam", 4)
    scheduler.fork(d0, child2)
    assert list(scheduler.waiting) == [p1, d0, child2]


def test_random_mixed_tiers_keep_their_order_and_every_page():
    rng = random.Random(5)
    scheduler = make_scheduler(max_num_seqs=6, max_num_batched_tokens=48, num_pages=20, max_model_len=128,
                               max_prefill_rows=2)
    seqs = []
    for number in range(60):
        if rng.random() < 0.5:
            seq = make_seq(f"s{number}", rng.randint(1, 60), priority=rng.random() < 0.3,
                           max_tokens=rng.randint(1, 20))
            seqs.append(seq)
            scheduler.add(seq)
        running_before = list(scheduler.running)
        output = step(scheduler)
        assert tiers_in_order(scheduler.running) and tiers_in_order(scheduler.waiting)
        if any(seq.priority for seq in output.preempted):
            # A priority sequence loses its pages only when no default-tier one is left to lose them.
            assert not any(not seq.priority for seq in scheduler.running)
        for seq in output.preempted:
            if not seq.priority:
                assert seq in running_before  # never a default-tier sequence admitted this very step
        if output.preempted:
            admitted = [item.seq for item in output.scheduled if item.seq not in running_before]
            assert all(seq.priority for seq in admitted)
    while scheduler.has_unfinished:
        step(scheduler)
    assert all(seq.num_output_tokens == seq.stop.max_tokens for seq in seqs)
    check_no_leak(scheduler)


def adapter(name: str):
    """A stand-in LoRA adapter: the scheduler's slots compare adapters by identity only."""
    return type("Adapter", (), {"name": name})()


def test_a_priority_request_takes_an_adapter_slot_from_the_default_tier_at_once():
    """One adapter slot, held by two running default-tier sequences of adapter A: a priority
    request of adapter B preempts both (and nothing else) and runs the next step; they wait
    for the slot rather than being readmitted and preempted again every step."""
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64, num_pages=64, max_model_len=256,
                               max_loras=1)
    a, b = adapter("a"), adapter("b")
    d0, d1 = make_seq("d0", 8, max_tokens=20), make_seq("d1", 8, max_tokens=20)
    d0.adapter = d1.adapter = a
    for seq in (d0, d1):
        scheduler.add(seq)
    step(scheduler)
    p = make_seq("p", 8, priority=True, max_tokens=4)
    p.adapter = b
    scheduler.add(p)
    output = step(scheduler)
    assert set(output.preempted) == {d0, d1} and [item.seq for item in output.scheduled] == [p]
    assert scheduler.adapters.resident == ["b"] and scheduler.adapters.take_writes()[-1][1] is b
    preemptions = d0.num_preemptions + d1.num_preemptions
    while p.status is not SequenceStatus.FINISHED:
        step(scheduler)
    assert d0.num_preemptions + d1.num_preemptions == preemptions  # not churned while p ran
    while scheduler.has_unfinished:
        step(scheduler)
    check_no_leak(scheduler)
    assert scheduler.adapters.holders == [0]


def test_a_priority_request_blocked_on_its_adapter_lets_the_next_priority_one_go():
    """The slot is held by a priority sequence, which no one preempts: the priority request of
    another adapter waits, and the base-model priority request behind it is still promoted,
    taking a sequence slot from the default tier."""
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64, num_pages=64, max_model_len=256,
                               max_loras=1)
    holder, default = make_seq("holder", 8, priority=True, max_tokens=20), make_seq("default", 8, max_tokens=20)
    holder.adapter = adapter("a")
    for seq in (holder, default):
        scheduler.add(seq)
    step(scheduler)
    blocked, base = make_seq("blocked", 8, priority=True), make_seq("base", 8, priority=True)
    blocked.adapter = adapter("b")
    for seq in (blocked, base):
        scheduler.add(seq)
    output = step(scheduler)
    assert output.preempted == [default]
    assert scheduler.running == [holder, base] and list(scheduler.waiting) == [blocked, default]
    while scheduler.has_unfinished:
        step(scheduler)
    check_no_leak(scheduler)
