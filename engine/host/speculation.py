"""Draft tokens without a draft model: a request's predicted output, and n-gram prompt lookup.

A draft is a guess at a sequence's next tokens. engine/verification.py checks a whole
draft in one step and keeps what the model would have produced anyway, so a draft only
ever changes the speed, never the output. Two sources, tried in this order:

- the prediction (OpenAI's and Fireworks' `prediction`, Fireworks' `speculation`): the
  output is expected to follow the predicted tokens. The draft continues the prediction
  from where the output stands in it; when the output departs from it (an edit), the
  latest output tokens are looked up in the prediction to find where it resumes;
- n-gram lookup (`--speculative ngram`): the longest recent n-gram of the sequence that
  also occurs earlier in it (prompt or output) proposes the tokens that followed it there,
  the prompt-lookup idea that pays off when the output copies from its context.

Host only: token lists are searched as bytes, so the scan runs in C.
"""

from __future__ import annotations

import array
from dataclasses import dataclass

from engine.host.sequence import Sequence

NGRAM_SIZES = range(4, 1, -1)  # n-grams tried by prompt lookup, longest first (1-grams are noise)
PREDICTION_SIZES = range(8, 0, -1)  # output suffixes looked up in a prediction after an edit
# Lookup stops for a sequence whose drafts keep failing: a checked draft replaces a decode
# window (8 tokens per device call), so drafts that are mostly wrong cost more than they save.
# Measured on chat answers that do not copy their prompt: 15 of 174 draft tokens kept, 10% slower.
LOOKUP_TRIAL_TOKENS = 32  # draft tokens checked before a sequence's record counts
LOOKUP_MIN_KEPT = 0.3  # the share of them it must keep to go on drafting


@dataclass(frozen=True)
class SpeculationConfig:
    """Where drafts come from and how long they may be."""

    ngram: bool = False  # prompt lookup for every request (predictions are always used)
    num_tokens: int = 7  # most draft tokens verified per sequence and step


def propose(seq: Sequence, config: SpeculationConfig, limit: int) -> list[int]:
    """Up to `limit` (at most config.num_tokens) tokens `seq` is expected to produce next;
    empty when there is no good guess."""
    limit = min(limit, config.num_tokens)
    if limit <= 0:
        return []
    draft = predicted_continuation(seq, limit) if seq.prediction else []
    if not draft and config.ngram and lookup_pays(seq):
        draft = lookup_continuation(seq.token_ids, limit, NGRAM_SIZES)
    return draft


def lookup_pays(seq: Sequence) -> bool:
    """Whether `seq`'s drafts so far are kept often enough to go on looking drafts up."""
    proposed = sum(seq.drafts_proposed)
    return proposed < LOOKUP_TRIAL_TOKENS or sum(seq.drafts_accepted) >= LOOKUP_MIN_KEPT * proposed


def follows_prediction(seq: Sequence) -> bool:
    """Whether `seq` has predicted tokens ahead of its output (so drafts may come)."""
    return bool(seq.prediction) and seq.num_output_tokens + seq.prediction_shift < len(seq.prediction)


def predicted_continuation(seq: Sequence, limit: int) -> list[int]:
    """The prediction's next tokens after the output so far, re-aligned after an edit."""
    prediction, outputs = seq.prediction, seq.output_token_ids
    expected = len(outputs) + seq.prediction_shift  # where the output stands in the prediction
    if not outputs or (0 < expected <= len(prediction) and prediction[expected - 1] == outputs[-1]):
        return list(prediction[expected: expected + limit])
    resumed = resume_point(outputs, prediction, expected)
    if resumed is None:
        return []
    seq.prediction_shift = resumed - len(outputs)
    return list(prediction[resumed: resumed + limit])


def resume_point(outputs: list[int], prediction: tuple[int, ...], expected: int) -> int | None:
    """Where in the prediction the output's latest tokens end, for the longest such suffix
    (the occurrence nearest `expected`); None if not even the last token occurs."""
    haystack = as_bytes(prediction)
    for size in PREDICTION_SIZES:
        if size > len(outputs):
            continue
        ends = occurrence_ends(haystack, as_bytes(outputs[-size:]))
        if ends:
            return min(ends, key=lambda end: (abs(end - expected), -end))
    return None


def lookup_continuation(token_ids: list[int], limit: int, sizes) -> list[int]:
    """What followed the latest earlier occurrence of the sequence's last n tokens (longest n
    first), up to `limit` tokens."""
    haystack = as_bytes(token_ids[:-1])  # the suffix itself must not count as its own match
    for size in sizes:
        if size >= len(token_ids):
            continue
        ends = occurrence_ends(haystack, as_bytes(token_ids[-size:]))
        if ends:
            end = max(ends)
            return token_ids[end: end + limit]
    return []


def occurrence_ends(haystack: bytes, needle: bytes) -> list[int]:
    """Token index just past each occurrence of `needle` in `haystack` (both int32 bytes),
    counting only matches aligned on token boundaries."""
    ends, start = [], haystack.find(needle)
    while start >= 0:
        if start % 4 == 0:
            ends.append((start + len(needle)) // 4)
        start = haystack.find(needle, start + 1)
    return ends


def as_bytes(token_ids) -> bytes:
    return array.array("i", token_ids).tobytes()
