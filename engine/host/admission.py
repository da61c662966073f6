"""The scheduler's admission policy: which waiting sequences start running in a step, and
what a priority sequence may preempt to start (engine/host/scheduler.py runs it each step).

Waiting priority sequences are promoted first, ahead of the step's running sequences: one
that finds every sequence slot taken preempts the least important running sequence while
that is of the default tier, and one whose LoRA adapter finds every adapter slot held
preempts the default-tier holders of one. Their pages come after, when the running
sequences reserve theirs. Then, once every running sequence has its chunk, waiting sequences
are admitted in order while the step's tokens, sequence slots and free pages last: this
only ever takes free pages, so an arriving default-tier request never preempts a running one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.host.scheduled import SchedulerOutput, chunk_of
from engine.host.sequence import Sequence

if TYPE_CHECKING:  # the scheduler calls into this module
    from engine.host.scheduler import Scheduler


def promote_priority(scheduler: Scheduler, output: SchedulerOutput) -> None:
    """Start the waiting priority sequences, with their prefix-cache hits, preempting
    default-tier sequences for what each lacks: a LoRA adapter slot (the holders of the
    least recently used slot that no priority sequence holds) and a sequence slot (the
    least important running sequences). One that priority sequences leave no room for
    waits, and the next priority one may still go. Pages come after: the scheduler reserves
    them with the running sequences', preempting default-tier sequences first, so a promoted
    sequence is computed in this very step."""
    waiting = scheduler.waiting
    index = 0
    while index < len(waiting) and waiting[index].priority:
        seq = waiting[index]
        if not (_free_adapter_slot(scheduler, seq, output) and _free_sequence_slot(scheduler, output)):
            index += 1  # held by priority sequences: it waits, and the next priority one may go
            continue
        del waiting[index]
        scheduler.adapters.acquire(seq)
        _start(scheduler, seq, scheduler.block_manager.allocate(seq))


def admit_waiting(scheduler: Scheduler, output: SchedulerOutput, budget: int) -> None:
    """Start waiting sequences in order while `budget` tokens, sequence slots and free pages
    last, each with its first chunk. One whose LoRA adapter finds every adapter slot held by
    others is passed over, to wait for a slot while the sequences behind it are admitted
    (engine/host/adapters.py)."""
    manager, waiting = scheduler.block_manager, scheduler.waiting
    index = 0
    while index < len(waiting) and budget > 0 and len(scheduler.running) < scheduler.max_num_seqs:
        seq = waiting[index]
        if min(seq.num_uncomputed_tokens, budget) > 1 and output.num_chunks >= scheduler.max_prefill_rows:
            break
        if not scheduler.adapters.can_acquire(seq):
            index += 1
            continue
        num_cached = manager.allocate(seq)
        num_new = scheduler.fit_embeddings(seq, min(seq.num_uncomputed_tokens, budget), output)
        if num_new == 0 or not manager.can_append(seq, num_new):
            manager.free(seq)  # give the prefix-cache hits back; wait for pages
            break
        scheduler.adapters.acquire(seq)  # only now: a sequence that waits for pages evicts no adapter
        manager.append(seq, num_new)
        del waiting[index]
        _start(scheduler, seq, num_cached)
        output.scheduled.append(chunk_of(seq, num_new))
        budget -= num_new


def _start(scheduler: Scheduler, seq: Sequence, num_cached: int) -> None:
    """Run `seq`, its first `num_cached` tokens found in the prefix cache. A sequence
    recomputed after a preemption keeps the count of its first admission, which its usage
    reports."""
    if seq.num_preemptions == 0:
        seq.num_cached_tokens = num_cached
    scheduler.start(seq)


def _free_adapter_slot(scheduler: Scheduler, seq: Sequence, output: SchedulerOutput) -> bool:
    """Whether `seq`'s adapter has a slot or can take one, once the default-tier
    sequences holding the least recently used slot that only they hold are preempted."""
    adapters = scheduler.adapters
    if adapters.can_acquire(seq):
        return True
    for slot in adapters.slots_by_recency():
        holders = [other for other in scheduler.running if other.adapter_slot == slot]
        if not any(other.priority for other in holders):
            for holder in holders:
                scheduler.stop_running(holder, first=True)
                output.preempted.append(holder)
            return True
    return False


def _free_sequence_slot(scheduler: Scheduler, output: SchedulerOutput) -> bool:
    """Whether a sequence slot is free, once default-tier sequences are preempted for one."""
    running = scheduler.running
    while len(running) >= scheduler.max_num_seqs:
        if running[-1].priority:
            return False  # every slot holds a priority sequence
        output.preempted.append(scheduler.preempt(running[-1]))
    return True
