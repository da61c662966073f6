"""What a caller gives the engine (Request, SamplingParams) and what it gets back (RequestOutput)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """Per-request generation settings. Issue 3 extends this with the full sampler."""

    temperature: float = 1.0  # 0 means greedy
    seed: int | None = None  # None: the engine picks one and reports it
    max_tokens: int = 16  # most tokens to generate
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()  # end generation besides the model's EOS tokens


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass
class RequestOutput:
    """One step's news for one request: the tokens it gained, and whether it finished."""

    request_id: str
    new_token_ids: list[int]
    text: str  # the text of new_token_ids, held back while it ends inside a UTF-8 character
    finish_reason: str | None  # "stop", "length", "abort", or None while running
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    num_output_tokens: int  # all generated so far
    seed: int = 0  # the seed actually used

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
