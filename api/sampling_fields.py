"""Request sampling fields to engine SamplingParams, each range checked (400 naming the field).

Shared by every generation route: a route gathers its request's fields into a plain mapping
of API field name -> value (None or absent: the default) and calls `sampling_params`.
Ranges come from the specs' descriptions and ../shared/API-DIALECTS.md (e.g. top_k up to
the vocabulary size, repetition_penalty in (0, 2]). Seeds are per choice: `choice_seed_list`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from api.errors import ApiError
from engine.request import SEED_MODULUS, SamplingParams, choice_seeds

MAX_LOGIT_BIAS_ENTRIES = 300
MAX_LOGPROBS = 20  # the engine computes at most 20 alternatives per token
SEED_LIMIT = 2**32  # seeds are uint32 on the device

# API field -> (SamplingParams attribute, low, high, low inclusive?) for plain numbers.
_NUMBER_RANGES: dict[str, tuple[str, float, float, bool]] = {
    "temperature": ("temperature", 0.0, 2.0, True),
    "top_p": ("top_p", 0.0, 1.0, True),
    "min_p": ("min_p", 0.0, 1.0, True),
    "typical_p": ("typical_p", 0.0, 1.0, True),
    "xtc_threshold": ("xtc_threshold", 0.0, 1.0, True),
    "xtc_probability": ("xtc_probability", 0.0, 1.0, True),
    "frequency_penalty": ("frequency_penalty", -2.0, 2.0, True),
    "presence_penalty": ("presence_penalty", -2.0, 2.0, True),
    "repetition_penalty": ("repetition_penalty", 0.0, 2.0, False),
    "mirostat_target": ("mirostat_target", 0.0, 100.0, True),  # bits of surprise
    "mirostat_lr": ("mirostat_lr", 0.0, 1.0, False),
}
_COUNTS = {"min_tokens": "min_tokens", "min_total_tokens": "min_total_tokens"}

# Every field name `sampling_params` reads, for the routes' field registries.
SAMPLING_FIELDS = frozenset({
    *_NUMBER_RANGES, *_COUNTS, "top_k", "logit_bias", "bad_word_tokens", "no_repeat_ngram",
    "ignore_eos", "forced_output_tokens", "stop_token_ids", "max_tokens", "logprobs",
    "prompt_logprobs",
})


def invalid(field: str, message: str) -> ApiError:
    """A 400 blaming `field`."""
    return ApiError(400, message, param=field)


def check_range(field: str, value: float, low: float, high: float, low_inclusive: bool = True) -> float:
    """`value` if it is finite and in the range, else a 400 naming `field`."""
    above_low = value >= low if low_inclusive else value > low
    if not (math.isfinite(value) and above_low and value <= high):
        bracket = "[" if low_inclusive else "("
        raise invalid(field, f"`{field}` must lie in {bracket}{low:g}, {high:g}]; got {value}")
    return value


def check_token_ids(field: str, ids: Sequence[int], vocab_size: int) -> tuple[int, ...]:
    bad = [token for token in ids if not 0 <= token < vocab_size]
    if bad:
        raise invalid(field, f"`{field}` holds token id {bad[0]}, outside the vocabulary [0, {vocab_size})")
    return tuple(ids)


def sampling_params(fields: Mapping[str, Any], vocab_size: int) -> SamplingParams:
    """SamplingParams from API field values (seed excluded: see `choice_seed_list`).

    Besides the spec names, `fields` may carry `stop_token_ids` (Friendli's stop_tokens and
    eos_token, flattened), `bad_word_tokens` as lists of ids, `logprobs` and
    `prompt_logprobs` as counts (None: none) and `max_tokens` already resolved."""
    values: dict[str, Any] = {}
    for field, (attribute, low, high, inclusive) in _NUMBER_RANGES.items():
        if fields.get(field) is not None:
            values[attribute] = check_range(field, float(fields[field]), low, high, inclusive)
    for field, attribute in _COUNTS.items():
        if fields.get(field) is not None:
            values[attribute] = int(check_range(field, fields[field], 0, math.inf))
    if fields.get("top_k") is not None:
        values["top_k"] = int(check_range("top_k", fields["top_k"], 0, vocab_size))
    for field in ("logprobs", "prompt_logprobs"):
        if fields.get(field) is not None:
            values[field] = int(check_range(field, fields[field], 0, MAX_LOGPROBS))
    if fields.get("max_tokens") is not None:
        values["max_tokens"] = int(check_range("max_tokens", fields["max_tokens"], 0, math.inf))
    if fields.get("ignore_eos") is not None:
        values["ignore_eos"] = bool(fields["ignore_eos"])
    values.update(_token_fields(fields, vocab_size))
    return SamplingParams(**values)


def _token_fields(fields: Mapping[str, Any], vocab_size: int) -> dict[str, Any]:
    """The fields that name token ids: biases, bans, forced and stop tokens."""
    values: dict[str, Any] = {}
    if fields.get("logit_bias"):
        values["logit_bias"] = logit_bias(fields["logit_bias"], vocab_size)
    if fields.get("bad_word_tokens"):
        values["bad_word_tokens"] = tuple(
            check_token_ids("bad_word_tokens", phrase, vocab_size) for phrase in fields["bad_word_tokens"])
    if fields.get("forced_output_tokens"):
        values["forced_output_tokens"] = check_token_ids("forced_output_tokens", fields["forced_output_tokens"], vocab_size)
    if fields.get("stop_token_ids"):
        values["stop_token_ids"] = check_token_ids("stop_token_ids", fields["stop_token_ids"], vocab_size)
    if fields.get("no_repeat_ngram") is not None:
        size = int(check_range("no_repeat_ngram", fields["no_repeat_ngram"], 0, math.inf))
        values["no_repeat_ngram_size"] = size if size > 1 else 0  # Friendli: 1 means off
    return values


def logit_bias(bias: Mapping[str, float], vocab_size: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias} as (id, bias) pairs: ids in the vocabulary, biases in [-100, 100]."""
    if len(bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise invalid("logit_bias", f"`logit_bias` may hold at most {MAX_LOGIT_BIAS_ENTRIES} entries; got {len(bias)}")
    pairs = []
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise invalid("logit_bias", f"`logit_bias` keys are token ids; got {key!r}") from None
        check_token_ids("logit_bias", [token], vocab_size)
        pairs.append((token, check_range("logit_bias", float(value), -100.0, 100.0)))
    return tuple(pairs)


def choice_seed_list(seed: int | list[int] | None, n: int,
                     draw: Callable[[], int] | None = None) -> list[int]:
    """The seed of each of n choices: a list must have n entries, each in [0, 2**32)."""
    given = seed if isinstance(seed, list) else [] if seed is None else [seed]
    for value in given:
        if not 0 <= value < SEED_LIMIT:
            raise invalid("seed", f"`seed` must lie in [0, {SEED_LIMIT - 1}]; got {value}")
    try:
        return choice_seeds(seed, n, draw or (lambda: random.randrange(SEED_MODULUS)))
    except ValueError as error:
        raise invalid("seed", f"`seed`: {error}") from None


def logprobs_count(logprobs: int | bool | None, top_logprobs: int | None) -> int | None:
    """How many alternatives per token: OpenAI's bool + top_logprobs, or the legacy int."""
    if top_logprobs is not None:
        check_range("top_logprobs", top_logprobs, 0, MAX_LOGPROBS)
        if logprobs is None or logprobs is False:
            raise invalid("top_logprobs", "`top_logprobs` needs `logprobs` set to true")
    if logprobs is None or logprobs is False:
        return None
    if logprobs is True:
        return top_logprobs or 0
    return int(check_range("logprobs", logprobs, 0, MAX_LOGPROBS))


def resolve_max_tokens(fields: Mapping[str, Any]) -> int | None:
    """`max_tokens` or its alias `max_completion_tokens` (never both); None if neither."""
    max_tokens, alias = fields.get("max_tokens"), fields.get("max_completion_tokens")
    if max_tokens is not None and alias is not None:
        raise invalid("max_completion_tokens", "give `max_tokens` or `max_completion_tokens`, not both")
    value = max_tokens if max_tokens is not None else alias
    if value is not None:
        check_range("max_tokens" if max_tokens is not None else "max_completion_tokens", value, 0, math.inf)
    return value
