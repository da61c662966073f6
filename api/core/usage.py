"""Token counts and timings of one HTTP request, kept up to date from its choices' events."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from engine.host.request import RequestOutput, SpeculationCounts


class CountedEvent(Protocol):
    index: int
    prompt_index: int
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    num_reasoning_tokens: int
    speculation: SpeculationCounts | None


@dataclass
class Usage:
    """Token counts of a request, kept up to date from its events.

    A prompt's tokens count once however many choices it has (as OpenAI and vLLM count
    them); its cached tokens are those of its first choice to report."""

    prompt_tokens: dict[int, int] = field(default_factory=dict)  # by prompt index
    cached_tokens: dict[int, int] = field(default_factory=dict)
    completion_tokens: dict[int, int] = field(default_factory=dict)  # by choice index
    reasoning_tokens: dict[int, int] = field(default_factory=dict)  # by choice index: those of its thinking
    speculation: dict[int, SpeculationCounts] = field(default_factory=dict)  # by choice index, once drafted

    def observe(self, event: CountedEvent) -> None:
        self.prompt_tokens.setdefault(event.prompt_index, event.num_prompt_tokens)
        self.cached_tokens.setdefault(event.prompt_index, event.num_cached_tokens)
        self.completion_tokens[event.index] = event.num_output_tokens
        self.reasoning_tokens[event.index] = event.num_reasoning_tokens
        if event.speculation is not None:
            self.speculation[event.index] = event.speculation

    @property
    def num_accepted_draft_tokens(self) -> int:
        """Draft tokens (predicted or looked up) the outputs kept."""
        return sum(counts.num_accepted for counts in self.speculation.values())

    @property
    def num_rejected_draft_tokens(self) -> int:
        """Draft tokens checked and not kept."""
        return sum(counts.num_rejected for counts in self.speculation.values())

    def acceptance_by_position(self) -> list[float]:
        """The share of draft tokens kept at each draft position, over all choices."""
        proposed: list[int] = []
        accepted: list[int] = []
        for counts in self.speculation.values():
            for position, (made, kept) in enumerate(zip(counts.proposed_by_position, counts.accepted_by_position)):
                if position == len(proposed):
                    proposed.append(0)
                    accepted.append(0)
                proposed[position] += made
                accepted[position] += kept
        return [kept / made for kept, made in zip(accepted, proposed)]

    @property
    def num_prompt_tokens(self) -> int:
        return sum(self.prompt_tokens.values())

    @property
    def num_cached_tokens(self) -> int:
        return sum(self.cached_tokens.values())

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.completion_tokens.values())

    @property
    def num_reasoning_tokens(self) -> int:
        """Completion tokens spent thinking (the thinking section's, its tags included)."""
        return sum(self.reasoning_tokens.values())


@dataclass
class Timing:
    """Monotonic times of one HTTP request, for the perf headers (seconds)."""

    started: float = field(default_factory=time.monotonic)
    first_token: float | None = None  # the request's first output
    finished: float | None = None

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def processing_time(self) -> float:
        return (self.finished or time.monotonic()) - self.started


@dataclass
class ChoiceTiming:
    """When one choice's tokens came, for the latency metrics."""

    first_token: float | None = None
    last_token: float | None = None
    last: RequestOutput | None = None

    def observe(self, output: RequestOutput) -> None:
        now = time.monotonic()
        if output.new_token_ids:
            self.first_token = self.first_token or now
            self.last_token = now
        self.last = output

    def time_to_first_token(self, started: float) -> float | None:
        return None if self.first_token is None else self.first_token - started

    def time_per_output_token(self) -> float | None:
        count = self.last.num_output_tokens if self.last else 0
        if count < 2 or self.first_token is None:
            return None
        return (self.last_token - self.first_token) / (count - 1)
