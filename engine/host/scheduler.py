"""Continuous batching with chunked prefill and preemption by recomputation (host only).

Each step the scheduler picks, for each scheduled sequence, `num_new_tokens` tokens starting
at its `num_computed_tokens`. A sequence whose chunk reaches the end of its tokens samples
one new token this step (a decode is a chunk of 1); a partial prefill chunk samples nothing.
Prefill chunks and decodes share one step under three budgets: `max_num_batched_tokens`
tokens, `max_num_seqs` running sequences, and `max_prefill_rows` rows of more than one
token (each such row reads its cached pages once for all its tokens, engine/device/attention/reference.py);
and a prompt chunk ends early rather than replace more input embeddings than a step has
rows for (`max_embedding_rows`, engine/host/embeddings.py).

Two service tiers (engine/host/tenancy.py). Both queues keep priority sequences ahead of
default-tier ones: `waiting` holds the priority tier first, each tier with its preempted
sequences first and then in arrival order; `running` holds the priority tier first, each
tier in admission order. So `running[-1]` is always the least important running sequence.

Each step, waiting priority sequences are promoted first: one that finds every sequence slot
taken preempts the least important running sequence while that is of the default tier (and
one whose LoRA adapter finds every adapter slot held preempts the default-tier holders of
one), and joins `running` at the end of the priority tier (with its prefix-cache hits). Then
running sequences go, in order. When one of them needs pages that are not free, the least
important running sequence is preempted (its pages freed, back to the front of its tier in
the queue, to be recomputed from prompt plus outputs), possibly itself. So a priority
sequence takes the step's tokens and pages before any default-tier one, preempting
default-tier sequences rather than wait, and a default-tier sequence never preempts a
priority one. Then waiting sequences are admitted in order while the budgets and free pages
last. Admission only ever takes free pages, so an arriving default-tier request never
preempts a running one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.host.adapters import AdapterSlots
from engine.host.block_manager import BlockManager
from engine.host.embeddings import chunk_within, replaced_between
from engine.host.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledSequence:
    """One sequence's share of a step: tokens [start, start + num_new_tokens) of it."""

    seq: Sequence
    num_new_tokens: int
    start: int  # seq.num_computed_tokens when scheduled: position of the first new token
    needs_sample: bool  # the chunk reaches the end of seq's tokens, so the step samples one


@dataclass
class SchedulerOutput:
    """What one step computes: `scheduled` in a stable order (running, then newly admitted)."""

    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)  # lost their pages this step

    @property
    def num_batched_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.scheduled)

    @property
    def sampled(self) -> list[ScheduledSequence]:
        """The scheduled rows that sample a token this step, in scheduled order."""
        return [item for item in self.scheduled if item.needs_sample]

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Decides what each engine step computes; knows nothing of sampling or stop conditions.

    Per step: `schedule()`, run the model on its output, then `update(output, tokens)`; the
    engine checks stop conditions on the sequences `update` returns and calls `finish`.
    """

    def __init__(self, config: EngineConfig, block_manager: BlockManager, adapters: AdapterSlots | None = None) -> None:
        if block_manager.page_size != config.page_size:
            raise ValueError("the block manager's page size differs from the engine's")
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.max_prefill_rows = config.max_prefill_rows
        self.max_embedding_rows = config.max_embedding_rows
        self.block_manager = block_manager
        self.adapters = adapters if adapters is not None else AdapterSlots(config.max_loras)
        self.waiting: deque[Sequence] = deque()  # the priority tier first; each: preempted first, then by arrival
        self.running: list[Sequence] = []  # the priority tier first; each in admission order
        self._num_added = 0

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_priority_running(self) -> int:
        """Running sequences of the priority tier (safe from another thread, as num_running is:
        the list is copied in one call)."""
        return sum(seq.priority for seq in list(self.running))

    @property
    def num_priority_waiting(self) -> int:
        return sum(seq.priority for seq in list(self.waiting))

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence (the engine has checked it fits the cache and max_model_len)."""
        assert seq.status is SequenceStatus.WAITING and not seq.block_table
        seq.arrival = self._num_added
        self._num_added += 1
        self._enqueue(seq)

    def abort(self, request_id: str) -> Sequence | None:
        """Finish a waiting or running sequence with reason "abort"; None if there is none."""
        for seq in (*self.running, *self.waiting):
            if seq.request_id == request_id:
                self.finish(seq, "abort")
                return seq
        return None

    def finish(self, seq: Sequence, reason: str) -> None:
        """Take `seq` out of the queues, free its pages and mark it finished with `reason`.

        Finishing a finished sequence changes nothing (its first reason stands).
        """
        if seq.status is SequenceStatus.FINISHED:
            return
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.adapters.release(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason

    def schedule(self) -> SchedulerOutput:
        """Pick this step's chunks, growing running sequences first, then admitting waiting ones."""
        output = SchedulerOutput()
        self._promote_priority(output)
        budget = self._schedule_running(output)
        # After a preemption pages are short: admitting now would only be preempted again.
        if not output.preempted:
            self._schedule_waiting(output, budget)
        while output.is_empty and self.waiting and self._release_idle():
            self._schedule_waiting(output, budget)
        return output

    def update(self, output: SchedulerOutput, sampled_token_ids: list[int]) -> list[Sequence]:
        """Record a finished step: advance computed tokens, append sampled tokens.

        `sampled_token_ids` holds one token per entry of `output.sampled`, that is per
        scheduled row with `needs_sample`, in scheduled order. Returns the sequences that
        gained a token, for the engine's stop checks. Sequences finished while the step
        ran (aborted) are skipped, and a beam's token is not appended: its search picks the
        next beams from every beam's candidates (engine/host/beam_search.py).
        """
        num_sampled = sum(item.needs_sample for item in output.scheduled)
        if len(sampled_token_ids) != num_sampled:
            raise ValueError(f"{len(sampled_token_ids)} tokens for {num_sampled} sampling rows")
        tokens = iter(sampled_token_ids)
        grown = []
        for item in output.scheduled:
            token_id = next(tokens) if item.needs_sample else None
            seq = item.seq
            if seq.status is not SequenceStatus.RUNNING:
                continue
            seq.num_computed_tokens += item.num_new_tokens
            self.block_manager.mark_computed(seq)
            self.block_manager.release_unseen(seq)
            if token_id is not None and seq.beam is None:
                seq.append_token(int(token_id))
                grown.append(seq)
        return grown

    def advance(self, seq: Sequence, token_ids: list[int]) -> None:
        """Record the rounds of a decode window that kept `token_ids` for `seq` at once
        (engine/host/window_output.py): as `update` round by round, each round computing the
        token before its own (the prefix cache reads only computed tokens)."""
        seq.token_ids.extend(token_ids)
        seq.num_computed_tokens += len(token_ids)
        self.block_manager.mark_computed(seq)
        self.block_manager.release_unseen(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Queue `child`, a beam forked from `parent`, right behind it: running with its
        parent's pages shared (BlockManager.fork), or waiting if the parent lost its pages."""
        child.arrival = parent.arrival
        child.num_preemptions = parent.num_preemptions
        if parent.status is SequenceStatus.RUNNING:
            self.block_manager.fork(parent, child)
            self.adapters.share(parent, child)
            child.status = SequenceStatus.RUNNING
            self.running.insert(self.running.index(parent) + 1, child)
        else:
            self.waiting.insert(self.waiting.index(parent) + 1, child)

    def requeue(self, seq: Sequence) -> None:
        """Free a running sequence's pages and queue it first in its tier, to be recomputed."""
        self._stop_running(seq, first=True)

    def _stop_running(self, seq: Sequence, first: bool) -> None:
        """Free running `seq`'s pages and adapter slot, and queue it again (first in its tier,
        or last) to be recomputed."""
        self.running.remove(seq)
        self.adapters.release(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self._enqueue(seq, first=first)

    def _enqueue(self, seq: Sequence, first: bool = False) -> None:
        """Queue `seq` at the front (a preempted sequence) or the back of its tier."""
        num_priority = self._num_priority(self.waiting)
        if seq.priority:
            self.waiting.insert(0 if first else num_priority, seq)
        else:
            self.waiting.insert(num_priority if first else len(self.waiting), seq)

    def _start(self, seq: Sequence) -> None:
        """Run `seq`, admitted: last of its tier in `running`."""
        seq.status = SequenceStatus.RUNNING
        self.running.insert(self._num_priority(self.running) if seq.priority else len(self.running), seq)

    @staticmethod
    def _num_priority(queue) -> int:
        """The priority sequences heading `queue` (every one it holds)."""
        count = 0
        for seq in queue:
            if not seq.priority:
                break
            count += 1
        return count

    def _promote_priority(self, output: SchedulerOutput) -> None:
        """Admit the waiting priority sequences, with their prefix-cache hits, preempting
        default-tier sequences for what each lacks: a LoRA adapter slot (the holders of the
        least recently used slot that no priority sequence holds) and a sequence slot (the
        least important running sequences). One that priority sequences leave no room for
        waits, and the next priority one may still go. Pages come after: `_schedule_running`
        reserves them, preempting default-tier sequences first (`_reserve`), so a promoted
        sequence is computed in this very step."""
        index = 0
        while index < len(self.waiting) and self.waiting[index].priority:
            seq = self.waiting[index]
            if not (self._free_adapter_slot(seq, output) and self._free_sequence_slot(output)):
                index += 1  # held by priority sequences: it waits, and the next priority one may go
                continue
            del self.waiting[index]
            self.adapters.acquire(seq)
            num_cached = self.block_manager.allocate(seq)
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = num_cached
            self._start(seq)

    def _free_adapter_slot(self, seq: Sequence, output: SchedulerOutput) -> bool:
        """Whether `seq`'s adapter has a slot or can take one, once the default-tier
        sequences holding the least recently used slot that only they hold are preempted."""
        if self.adapters.can_acquire(seq):
            return True
        for slot in self.adapters.slots_by_recency():
            holders = [other for other in self.running if other.adapter_slot == slot]
            if not any(other.priority for other in holders):
                for holder in holders:
                    self._stop_running(holder, first=True)
                    output.preempted.append(holder)
                return True
        return False

    def _free_sequence_slot(self, output: SchedulerOutput) -> bool:
        """Whether a sequence slot is free, once default-tier sequences are preempted for one."""
        while len(self.running) >= self.max_num_seqs:
            if self.running[-1].priority:
                return False  # every slot holds a priority sequence
            output.preempted.append(self._preempt(self.running[-1]))
        return True

    def _release_idle(self) -> bool:
        """Free the pages of the newest idle sequence, queued last: a beam that has proposed
        its candidates and waits for the rest of its search (engine/host/beam_search.py). Called
        when nothing else can run, so that a waiting beam, perhaps of the same search, gets
        the pages or the sequence slot it needs. False when no sequence is idle."""
        idle = next((seq for seq in reversed(self.running) if seq.num_uncomputed_tokens == 0), None)
        if idle is None:
            return False
        self._stop_running(idle, first=False)
        return True

    def _schedule_running(self, output: SchedulerOutput) -> int:
        """Schedule running sequences in order (priority first); return the token budget left."""
        budget = self.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            wanted = self._fit_embeddings(seq, min(seq.num_uncomputed_tokens, budget), output)
            if wanted == 0 or (wanted > 1 and self._num_chunks(output) >= self.max_prefill_rows):
                index += 1  # a prompt chunk waits for a step with room for one
                continue
            num_new = self._reserve(seq, wanted, output)
            if num_new == 0:  # seq itself was preempted; it was the last one running
                break
            output.scheduled.append(self._chunk(seq, num_new))
            budget -= num_new
            index += 1
        return budget

    def _reserve(self, seq: Sequence, num_new: int, output: SchedulerOutput) -> int:
        """Get pages for `num_new` tokens of running `seq`, preempting less important sequences
        (default-tier ones first, then newer ones of its tier).

        When `seq` is the least important, its chunk shrinks to what fits rather than being thrown
        away; only when not one token fits is it preempted. Returns the tokens reserved.
        """
        manager = self.block_manager
        while not manager.can_append(seq, num_new):
            if self.running[-1] is not seq:
                output.preempted.append(self._preempt(self.running[-1]))
                continue
            num_new = min(num_new, manager.num_appendable_tokens(seq))
            if num_new <= 0:
                output.preempted.append(self._preempt(seq))
                return 0
        manager.append(seq, num_new)
        return num_new

    def _preempt(self, seq: Sequence) -> Sequence:
        """Free the pages of the least important running `seq`; it waits first in its tier's
        line to be recomputed."""
        assert self.running[-1] is seq
        self._stop_running(seq, first=True)
        return seq

    def _schedule_waiting(self, output: SchedulerOutput, budget: int) -> None:
        """Admit waiting sequences in order while tokens, sequence slots and free pages last.
        One whose LoRA adapter finds every adapter slot held by others is passed over, to
        wait for a slot while the sequences behind it are admitted (engine/host/adapters.py)."""
        manager = self.block_manager
        index = 0
        while index < len(self.waiting) and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[index]
            if min(seq.num_uncomputed_tokens, budget) > 1 and self._num_chunks(output) >= self.max_prefill_rows:
                break
            if not self.adapters.can_acquire(seq):
                index += 1
                continue
            num_cached = manager.allocate(seq)
            num_new = self._fit_embeddings(seq, min(seq.num_uncomputed_tokens, budget), output)
            if num_new == 0 or not manager.can_append(seq, num_new):
                manager.free(seq)  # give the prefix-cache hits back; wait for pages
                break
            self.adapters.acquire(seq)  # only now: a sequence that waits for pages evicts no adapter
            manager.append(seq, num_new)
            del self.waiting[index]
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = num_cached
            self._start(seq)
            output.scheduled.append(self._chunk(seq, num_new))
            budget -= num_new

    def _fit_embeddings(self, seq: Sequence, wanted: int, output: SchedulerOutput) -> int:
        """`wanted` tokens of `seq`, fewer where its replaced embeddings would overflow the
        step's embedding rows (engine/host/embeddings.py); 0 when not one more fits."""
        if not seq.embeddings:
            return wanted
        used = sum(len(replaced_between(item.seq, item.start, item.num_new_tokens)) for item in output.scheduled)
        return chunk_within(seq, seq.num_computed_tokens, wanted, self.max_embedding_rows - used)

    @staticmethod
    def _num_chunks(output: SchedulerOutput) -> int:
        """Rows of several tokens scheduled so far this step."""
        return sum(item.num_new_tokens > 1 for item in output.scheduled)

    @staticmethod
    def _chunk(seq: Sequence, num_new: int) -> ScheduledSequence:
        needs_sample = seq.needs_sample_after(num_new)
        return ScheduledSequence(seq, num_new, seq.num_computed_tokens, needs_sample)
