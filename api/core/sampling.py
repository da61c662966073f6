"""Request fields to the engine's SamplingParams and StopCriteria, every value checked.

The fields that are plainly engine parameters are the ones the dialect's registry marks
`Sampled` or `Stopping` (api/core/registry.py): `engine_values` reads them all and checks
each against the bounds SamplingParams and StopCriteria declare (engine/sampling/params.py),
a value out of bounds being a 400 that names the field. The conversions below serve the
fields that need more than a range: token ids, logit biases, seeds, logprob counts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.core.errors import invalid
from api.core.refusals import plain
from api.core.registry import Registry, Sampled
from engine.host.request import SEED_MODULUS, SamplingParams, StopCriteria, choice_seeds
from engine.sampling.params import MAX_LOGIT_BIAS, MAX_LOGPROBS, Bounds, bounds_of

SEED_LIMIT = 2**32  # seeds are uint32 on the device


@dataclass
class EngineValues:
    """Keyword values for SamplingParams and StopCriteria, gathered from a request."""

    sampling: dict[str, Any] = field(default_factory=dict)
    stop: dict[str, Any] = field(default_factory=dict)

    def sampling_params(self, **planned: Any) -> SamplingParams:
        return SamplingParams(**{**self.sampling, **planned})

    def stop_criteria(self, **planned: Any) -> StopCriteria:
        return StopCriteria(**{**self.stop, **planned})


def engine_values(registry: Registry, models: Sequence[type], values: Mapping[str, Any],
                  fields_set: Iterable[str], vocab_size: int) -> EngineValues:
    """The given, non-null fields the registry marks Sampled or Stopping, checked."""
    gathered = EngineValues()
    for name, decision in registry.engine_fields(models, fields_set).items():
        value = plain(values.get(name))
        if value is None:
            continue
        attribute = decision.attribute or name
        params_cls = SamplingParams if isinstance(decision, Sampled) else StopCriteria
        target = gathered.sampling if isinstance(decision, Sampled) else gathered.stop
        target[attribute] = checked(name, value, bounds_of(params_cls, attribute), vocab_size)
    return gathered


def checked(name: str, value: Any, bounds: Bounds | None, vocab_size: int) -> Any:
    """`value` within `bounds` (a 400 naming field `name` otherwise); a flag as a bool."""
    if bounds is None:
        return bool(value) if isinstance(value, bool) else value
    try:
        return bounds.check(value, vocab_size)
    except ValueError as error:
        raise invalid(name, f"`{name}` {error}") from None


def check_range(name: str, value: float, low: float, high: float, *, integer: bool = False) -> float | int:
    """`value` in [low, high], else a 400 naming field `name`."""
    return checked(name, value, Bounds(low, high, integer=integer), 0)


def check_count(name: str, value: Any, high: float = math.inf) -> int:
    """A whole number in [0, high] (a 400 naming `name` otherwise)."""
    return int(check_range(name, value, 0, high, integer=True))


def check_token_ids(name: str, ids: Sequence[int], vocab_size: int) -> tuple[int, ...]:
    bad = [token for token in ids if not 0 <= token < vocab_size]
    if bad:
        raise invalid(name, f"`{name}` holds token id {bad[0]}, outside the vocabulary [0, {vocab_size})")
    return tuple(ids)


def logit_bias(bias: Mapping[str, float] | None, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias} as (id, bias) pairs: ids in the vocabulary, biases in [-100, 100]."""
    if not bias:
        return ()
    if len(bias) > MAX_LOGIT_BIAS:
        raise invalid("logit_bias", f"`logit_bias` may hold at most {MAX_LOGIT_BIAS} entries; got {len(bias)}")
    pairs = []
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise invalid("logit_bias", f"`logit_bias` keys are token ids; got {key!r}") from None
        check_token_ids("logit_bias", [token], vocab_size)
        pairs.append((token, float(check_range("logit_bias", value, -100.0, 100.0))))
    return tuple(pairs)


def choice_seed_list(seed: int | list[int] | None, n: int, draw: Callable[[], int] | None = None) -> list[int]:
    """The seed of each of n choices: a list must have n entries, each in [0, 2**32)."""
    given_seeds = seed if isinstance(seed, list) else [] if seed is None else [seed]
    for value in given_seeds:
        if not 0 <= value < SEED_LIMIT:
            raise invalid("seed", f"`seed` must lie in [0, {SEED_LIMIT - 1}]; got {value}")
    try:
        return choice_seeds(seed, n, draw or (lambda: random.randrange(SEED_MODULUS)))
    except ValueError as error:
        raise invalid("seed", f"`seed`: {error}") from None


def logprobs_count(logprobs: int | bool | None, top_logprobs: int | None) -> int | None:
    """How many alternatives per token: OpenAI's bool + top_logprobs, or the legacy int."""
    if top_logprobs is not None:
        check_count("top_logprobs", top_logprobs, MAX_LOGPROBS)
        if logprobs is None or logprobs is False:
            raise invalid("top_logprobs", "`top_logprobs` needs `logprobs` set to true")
    if logprobs is None or logprobs is False:
        return None
    if logprobs is True:
        return top_logprobs or 0
    return check_count("logprobs", logprobs, MAX_LOGPROBS)


def resolve_max_tokens(max_tokens: int | None, max_completion_tokens: int | None) -> int | None:
    """`max_tokens` or its alias `max_completion_tokens` (never both); None if neither."""
    if max_tokens is not None and max_completion_tokens is not None:
        raise invalid("max_completion_tokens", "give `max_tokens` or `max_completion_tokens`, not both")
    if max_tokens is not None:
        return check_count("max_tokens", max_tokens)
    if max_completion_tokens is not None:
        return check_count("max_completion_tokens", max_completion_tokens)
    return None
