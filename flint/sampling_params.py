"""`SamplingParams` as vLLM's offline API names them, turned into the engine's requests
(engine/host/request.py): one request a choice, their seeds derived as the HTTP API derives
them (`choice_seeds`), so a seeded call reproduces a seeded HTTP request."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from engine.host.request import SEED_MODULUS, Request, StopCriteria, choice_seeds
from engine.sampling.params import SamplingParams as EngineSampling
from engine.sampling.params import bounds_of


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int = 16
    min_tokens: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None  # top alternatives per generated token; None: no logprobs
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, not {self.n}")

    def engine_requests(self, request_id: str, prompt_ids: list[int]) -> list[Request]:
        """One engine request a choice, `{request_id}-{index}`; ValueError naming a field out
        of the engine's bounds."""
        seeds = choice_seeds(self.seed, self.n, lambda: random.randrange(SEED_MODULUS))
        return [Request(f"{request_id}-{index}", list(prompt_ids), self._sampling(seed), self._stop())
                for index, seed in enumerate(seeds)]

    def _sampling(self, seed: int) -> EngineSampling:
        shared = {name: getattr(self, name) for name in (
            "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
            "logprobs", "prompt_logprobs")}
        return EngineSampling(top_k=max(self.top_k, 0), seed=seed, **checked(EngineSampling, shared))

    def _stop(self) -> StopCriteria:
        strings = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        limits = checked(StopCriteria, {"max_tokens": self.max_tokens, "min_tokens": self.min_tokens})
        return StopCriteria(strings=strings, token_ids=tuple(self.stop_token_ids or ()), ignore_eos=self.ignore_eos,
                            **limits)

    def replace(self, **changes) -> SamplingParams:
        return dataclasses.replace(self, **changes)


def checked(params_cls: type, values: dict) -> dict:
    """`values` within the bounds `params_cls` declares for them (the HTTP API's, engine/
    sampling/params.py); ValueError naming the first field outside them."""
    for name, value in values.items():
        bounds = bounds_of(params_cls, name)
        if bounds is not None and value is not None:
            try:
                values[name] = bounds.check(value)
            except ValueError as error:
                raise ValueError(f"SamplingParams.{name} {error}") from None
    return values
