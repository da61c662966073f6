"""What a request asks of the sampler (SamplingParams), each per-row parameter declared once.

A per-row parameter is declared by `row(...)` on its SamplingParams field: its default, the
values a request may give it, and the dtype and padding value of its row in the device
arrays. engine/sampling/arrays.py builds the rows from these declarations and the API checks
request values against the same bounds, so adding a parameter is its declaration here, its
use in the sampling step, and one registry entry in each API dialect that carries it.

Fields that reach the device another way (biases, bans and forced tokens become masks and
id lists on the host; logprob counts pick what the host reads back) are declared with
`bounded(...)` where a request value has a range, or plainly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

BOUNDS = "bounds"  # field metadata keys
ROW = "row"
MAX_LOGPROBS = 20  # top alternatives computed per token, at most
MAX_LOGIT_BIAS = 300  # logit_bias entries per request, as OpenAI allows


class VocabSize(float):
    """The upper bound `VOCAB_SIZE`: the served model's vocabulary size, known per engine."""


VOCAB_SIZE = VocabSize(math.inf)


@dataclass(frozen=True)
class Bounds:
    """The values a request may give a parameter: [low, high], or (low, high]."""

    low: float
    high: float  # math.inf: unbounded; VOCAB_SIZE: the vocabulary size
    low_inclusive: bool = True
    integer: bool = False

    def check(self, value: Any, vocab_size: int | None = None) -> float | int:
        """`value` as the parameter's type; ValueError naming the range when outside it."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number; got {value!r}")
        high = vocab_size if isinstance(self.high, VocabSize) and vocab_size is not None else self.high
        above_low = value >= self.low if self.low_inclusive else value > self.low
        if not (math.isfinite(value) and above_low and value <= high):
            bracket = "[" if self.low_inclusive else "("
            raise ValueError(f"must lie in {bracket}{self.low:g}, {high:g}]; got {value}")
        if self.integer and value != int(value):
            raise ValueError(f"must be a whole number; got {value}")
        return int(value) if self.integer else float(value)


@dataclass(frozen=True)
class RowSpec:
    """How a parameter is laid out on the device: one value per batch row."""

    dtype: type
    pad: float | int  # what padding rows hold: a value that changes nothing


def row(default: float | int, dtype: type, *, low: float, high: float, low_inclusive: bool = True,
        pad: float | int | None = None) -> Any:
    """A per-row sampling parameter (see the module docstring); `pad` defaults to `default`."""
    integer = np.issubdtype(dtype, np.integer)
    metadata = {BOUNDS: Bounds(low, high, low_inclusive, integer),
                ROW: RowSpec(dtype, default if pad is None else pad)}
    return dataclasses.field(default=default, metadata=metadata)


def bounded(default: Any, *, low: float, high: float, low_inclusive: bool = True,
            integer: bool = True) -> Any:
    """A parameter with a range that is not a device row."""
    return dataclasses.field(default=default, metadata={BOUNDS: Bounds(low, high, low_inclusive, integer)})


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings; the `row` ones become one row of the fused sampling step."""

    temperature: float = row(1.0, np.float32, low=0.0, high=2.0, pad=0.0)  # 0 means greedy
    # Distribution shaping (off at these defaults).
    top_k: int = row(0, np.int32, low=-1, high=VOCAB_SIZE)  # 0, or vLLM's -1: off
    top_p: float = row(1.0, np.float32, low=0.0, high=1.0)
    min_p: float = row(0.0, np.float32, low=0.0, high=1.0)  # relative to the top token's probability
    typical_p: float = row(1.0, np.float32, low=0.0, high=1.0)
    xtc_threshold: float = row(0.1, np.float32, low=0.0, high=1.0)
    xtc_probability: float = row(0.0, np.float32, low=0.0, high=1.0)
    # Penalties: frequency and presence over generated tokens (OpenAI), repetition over
    # prompt and generated tokens (HF / Keskar).
    frequency_penalty: float = row(0.0, np.float32, low=-2.0, high=2.0)
    presence_penalty: float = row(0.0, np.float32, low=-2.0, high=2.0)
    repetition_penalty: float = row(1.0, np.float32, low=0.0, high=2.0, low_inclusive=False)
    # Mirostat v2 (off when the target is 0), target in bits of surprise.
    mirostat_target: float = row(0.0, np.float32, low=0.0, high=100.0)
    mirostat_lr: float = row(0.1, np.float32, low=0.0, high=1.0, low_inclusive=False)
    seed: int | None = None  # None: the engine picks one and reports it
    # Biases and bans.
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias in -100..100)
    bad_word_tokens: tuple[tuple[int, ...], ...] = ()  # phrases whose last token is banned after the rest
    no_repeat_ngram_size: int = bounded(0, low=0, high=math.inf)
    # Friendli's forced_output_tokens: the first outputs, whatever the model says.
    forced_output_tokens: tuple[int, ...] = ()
    # Top alternatives per sampled token (0-20); None: no logprobs.
    logprobs: int | None = bounded(None, low=0, high=MAX_LOGPROBS)
    # Logprobs of the prompt's tokens (echo, lm-eval's loglikelihood): top alternatives per
    # token (0-20), None: none. Such a prompt is computed in full, not read from the prefix cache.
    prompt_logprobs: int | None = bounded(None, low=0, high=MAX_LOGPROBS)
    # Return each sampled token's raw model logit (Friendli's include_output_logits).
    output_logits: bool = False


def declared_rows(params_cls: type = SamplingParams) -> dict[str, RowSpec]:
    """Attribute -> RowSpec of every per-row parameter, in declaration order."""
    return {field.name: field.metadata[ROW] for field in dataclasses.fields(params_cls) if ROW in field.metadata}


def bounds_of(params_cls: type, attribute: str) -> Bounds | None:
    """The declared bounds of `params_cls.attribute`, None where it has none."""
    field = {f.name: f for f in dataclasses.fields(params_cls)}[attribute]
    return field.metadata.get(BOUNDS)
