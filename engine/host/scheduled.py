"""What the scheduler hands a step (engine/host/scheduler.py): each scheduled sequence's chunk."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.host.sequence import Sequence


@dataclass(frozen=True)
class ScheduledSequence:
    """One sequence's share of a step: tokens [start, start + num_new_tokens) of it."""

    seq: Sequence
    num_new_tokens: int
    start: int  # seq.num_computed_tokens when scheduled: position of the first new token
    needs_sample: bool  # the chunk reaches the end of seq's tokens, so the step samples one


def chunk_of(seq: Sequence, num_new: int) -> ScheduledSequence:
    """`seq`'s next `num_new` tokens, from its computed ones."""
    return ScheduledSequence(seq, num_new, seq.num_computed_tokens, seq.needs_sample_after(num_new))


@dataclass
class SchedulerOutput:
    """What one step computes: `scheduled` in a stable order (running, then newly admitted)."""

    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)  # lost their pages this step

    @property
    def num_batched_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.scheduled)

    @property
    def num_chunks(self) -> int:
        """Rows of several tokens scheduled so far (a step holds `max_prefill_rows` of them)."""
        return sum(item.num_new_tokens > 1 for item in self.scheduled)

    @property
    def sampled(self) -> list[ScheduledSequence]:
        """The scheduled rows that sample a token this step, in scheduled order."""
        return [item for item in self.scheduled if item.needs_sample]

    @property
    def is_empty(self) -> bool:
        return not self.scheduled
