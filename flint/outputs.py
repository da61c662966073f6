"""What `LLM.generate` returns, shaped as vLLM's offline results: one `RequestOutput` a prompt,
holding one `CompletionOutput` a choice."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Logprob:
    """A token's log probability under the model, and under the sampling distribution that
    drew it (temperature, top-p and the rest applied), with its rank under the model."""

    logprob: float
    sampling_logprob: float | None = None
    rank: int | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    # Per generated token: its id and the top alternatives by id, each a Logprob (None: not asked).
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str | None = None  # "stop", "length", "abort" or "error"
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it
    cumulative_logprob: float | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


PromptLogprobs = list[dict[int, Logprob] | None]


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    num_cached_tokens: int = 0  # prompt tokens read from the prefix cache (the most over the choices)
    # Where asked (SamplingParams.prompt_logprobs): None for the first token, then each token's.
    prompt_logprobs: PromptLogprobs | None = None

    @property
    def finished(self) -> bool:
        return all(output.finished for output in self.outputs)


@dataclass(frozen=True)
class BeamSearchSequence:
    """One hypothesis of a beam search: the prompt's tokens and its own, its text, and its
    summed logprob and score (the sum over its length ** length_penalty)."""

    tokens: list[int]
    text: str
    cum_logprob: float
    score: float
    finish_reason: str  # "stop" (an end token) or "length"


@dataclass(frozen=True)
class BeamSearchOutput:
    sequences: list[BeamSearchSequence]  # best first
