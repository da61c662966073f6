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
from engine.text.tokenizer import Tokenizer
from flint.structured_outputs import StructuredOutputsParams

# Fields passed to the engine's sampling as they are (the HTTP API honours each).
ENGINE_FIELDS = ("temperature", "top_p", "min_p", "typical_p", "xtc_threshold", "xtc_probability",
                 "presence_penalty", "frequency_penalty", "repetition_penalty", "mirostat_target", "mirostat_lr",
                 "no_repeat_ngram_size", "logprobs", "prompt_logprobs")


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    typical_p: float = 1.0
    xtc_threshold: float = 0.1  # XTC: with this probability, the likeliest tokens above the threshold
    xtc_probability: float = 0.0  # but the least of them are dropped
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    mirostat_target: float = 0.0  # Mirostat v2's target surprise (0: off)
    mirostat_lr: float = 0.1
    no_repeat_ngram_size: int = 0
    logit_bias: dict[int, float] | None = None  # token id -> bias added to its logit (-100 to 100)
    bad_words: list[str] | None = None  # phrases never generated (their last token banned after the rest)
    seed: int | list[int] | None = None  # a list: each choice's own seed (n of them)
    max_tokens: int = 16
    min_tokens: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None  # top alternatives per generated token; None: no logprobs
    prompt_logprobs: int | None = None  # top alternatives per prompt token; None: none
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, not {self.n}")

    def engine_requests(self, request_id: str, prompt_ids: list[int], tokenizer: Tokenizer) -> list[Request]:
        """One engine request a choice, `{request_id}-{index}`; ValueError naming a field out
        of the engine's bounds."""
        seeds = choice_seeds(self.seed, self.n, lambda: random.randrange(SEED_MODULUS))
        grammar = None if self.structured_outputs is None else self.structured_outputs.grammar_of()
        return [Request(f"{request_id}-{index}", list(prompt_ids), self._sampling(seed, tokenizer), self._stop(),
                        grammar=grammar)
                for index, seed in enumerate(seeds)]

    def _sampling(self, seed: int, tokenizer: Tokenizer) -> EngineSampling:
        shared = checked(EngineSampling, {name: getattr(self, name) for name in ENGINE_FIELDS})
        bias = tuple(sorted((int(token), float(value)) for token, value in (self.logit_bias or {}).items()))
        banned = tuple(tuple(tokenizer.encode(word, add_special_tokens=False)) for word in self.bad_words or ())
        return EngineSampling(top_k=max(self.top_k, 0), seed=seed, logit_bias=checked_bias(bias, tokenizer),
                              bad_word_tokens=banned, **shared)

    def _stop(self) -> StopCriteria:
        strings = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        limits = checked(StopCriteria, {"max_tokens": self.max_tokens, "min_tokens": self.min_tokens})
        return StopCriteria(strings=strings, token_ids=tuple(self.stop_token_ids or ()), ignore_eos=self.ignore_eos,
                            **limits)

    def replace(self, **changes) -> SamplingParams:
        return dataclasses.replace(self, **changes)


def checked_bias(bias: tuple[tuple[int, float], ...], tokenizer: Tokenizer) -> tuple[tuple[int, float], ...]:
    for token, value in bias:
        if not 0 <= token < tokenizer.vocab_size:
            raise ValueError(f"SamplingParams.logit_bias names token {token}, outside the vocabulary")
        if not -100 <= value <= 100:
            raise ValueError(f"SamplingParams.logit_bias[{token}] must lie in [-100, 100], not {value}")
    return bias


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
