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

Each step, waiting priority sequences are promoted first (engine/host/admission.py, the
admission policy), joining `running` at the end of the priority tier. Then running sequences
go, in order. When one of them needs pages that are not free, the least important running
sequence is preempted (its pages freed, back to the front of its tier in the queue, to be
recomputed from prompt plus outputs), possibly itself. So a priority sequence takes the
step's tokens and pages before any default-tier one, preempting default-tier sequences
rather than wait, and a default-tier sequence never preempts a priority one. Then waiting
sequences are admitted in order while the budgets and free pages last (admission.py again).
"""

from __future__ import annotations

from collections import deque

from engine.config import EngineConfig
from engine.host.adapters import AdapterSlots
from engine.host.admission import admit_waiting, promote_priority
from engine.host.block_manager import BlockManager
from engine.host.embeddings import chunk_within, replaced_between
from engine.host.scheduled import SchedulerOutput, chunk_of
from engine.host.sequence import Sequence, SequenceStatus


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
        promote_priority(self, output)
        budget = self._schedule_running(output)
        # After a preemption pages are short: admitting now would only be preempted again.
        if not output.preempted:
            admit_waiting(self, output, budget)
        while output.is_empty and self.waiting and self._release_idle():
            admit_waiting(self, output, budget)
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
        self.stop_running(seq, first=True)

    def stop_running(self, seq: Sequence, first: bool) -> None:
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

    def start(self, seq: Sequence) -> None:
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

    def _release_idle(self) -> bool:
        """Free the pages of the newest idle sequence, queued last: a beam that has proposed
        its candidates and waits for the rest of its search (engine/host/beam_search.py). Called
        when nothing else can run, so that a waiting beam, perhaps of the same search, gets
        the pages or the sequence slot it needs. False when no sequence is idle."""
        idle = next((seq for seq in reversed(self.running) if seq.num_uncomputed_tokens == 0), None)
        if idle is None:
            return False
        self.stop_running(idle, first=False)
        return True

    def _schedule_running(self, output: SchedulerOutput) -> int:
        """Schedule running sequences in order (priority first); return the token budget left."""
        budget = self.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            wanted = self.fit_embeddings(seq, min(seq.num_uncomputed_tokens, budget), output)
            if wanted == 0 or (wanted > 1 and output.num_chunks >= self.max_prefill_rows):
                index += 1  # a prompt chunk waits for a step with room for one
                continue
            num_new = self._reserve(seq, wanted, output)
            if num_new == 0:  # seq itself was preempted; it was the last one running
                break
            output.scheduled.append(chunk_of(seq, num_new))
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
                output.preempted.append(self.preempt(self.running[-1]))
                continue
            num_new = min(num_new, manager.num_appendable_tokens(seq))
            if num_new <= 0:
                output.preempted.append(self.preempt(seq))
                return 0
        manager.append(seq, num_new)
        return num_new

    def preempt(self, seq: Sequence) -> Sequence:
        """Free the pages of the least important running `seq`; it waits first in its tier's
        line to be recomputed."""
        assert self.running[-1] is seq
        self.stop_running(seq, first=True)
        return seq

    def fit_embeddings(self, seq: Sequence, wanted: int, output: SchedulerOutput) -> int:
        """`wanted` tokens of `seq`, fewer where its replaced embeddings would overflow the
        step's embedding rows (engine/host/embeddings.py); 0 when not one more fits."""
        if not seq.embeddings:
            return wanted
        used = sum(len(replaced_between(item.seq, item.start, item.num_new_tokens)) for item in output.scheduled)
        return chunk_within(seq, seq.num_computed_tokens, wanted, self.max_embedding_rows - used)
