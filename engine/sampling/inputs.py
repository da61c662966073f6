"""Host side of the sampling step: one SamplingParams (plus the sequence's state) per row.

Everything that depends only on token ids the host already knows (bad words, repeated
n-grams, EOS before min_tokens, forced tokens) becomes bits cleared in the row's packed
allowed-token mask, the same hook structured outputs use, so the device sees one mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.request import SamplingParams
from engine.sampling.sampler import MAX_LOGIT_BIAS, SamplingArrays
from engine.sampling.host import bad_word_bans, force_token, no_repeat_ngram_bans, pack_banned, stop_bans


@dataclass
class RowSampling:
    """What one row of the sampling step needs from its sequence."""

    params: SamplingParams
    seed: int
    token_ids: list[int]  # prompt then outputs so far
    num_prompt_tokens: int
    end_token_ids: frozenset[int]  # EOS and stop tokens: banned until both length floors are reached
    min_tokens: int = 0
    min_total_tokens: int = 0
    mirostat_mu: float = 0.0


def allowed_words(row: RowSampling, vocab_size: int) -> list[int] | None:
    """The row's packed mask, or None when it allows every token."""
    params, outputs = row.params, row.token_ids[row.num_prompt_tokens:]
    if len(outputs) < len(params.forced_output_tokens):
        return force_token(params.forced_output_tokens[len(outputs)], vocab_size)
    banned = stop_bans(len(outputs), row.min_tokens, len(row.token_ids),
                       row.min_total_tokens or None, row.end_token_ids)
    if params.bad_word_tokens:
        banned |= bad_word_bans(outputs, [list(p) for p in params.bad_word_tokens])
    if params.no_repeat_ngram_size:
        banned |= no_repeat_ngram_bans(row.token_ids, params.no_repeat_ngram_size)
    return pack_banned(banned, vocab_size) if banned else None


def fill_row(arrays: SamplingArrays, index: int, row: RowSampling, position: int, vocab_size: int) -> None:
    """Write `row` into row `index` of host arrays made by empty_sampling_arrays."""
    p = row.params
    for name in ("temperature", "top_k", "top_p", "min_p", "typical_p", "xtc_threshold", "xtc_probability",
                 "frequency_penalty", "presence_penalty", "repetition_penalty", "mirostat_target", "mirostat_lr"):
        getattr(arrays, name)[index] = getattr(p, name)
    arrays.mirostat_mu[index] = row.mirostat_mu
    arrays.seeds[index] = row.seed
    arrays.positions[index] = position
    arrays.want_logprobs[index] = p.logprobs is not None
    if p.logit_bias:
        ids, values = zip(*p.logit_bias[:MAX_LOGIT_BIAS])
        arrays.bias_ids[index, : len(ids)] = ids
        arrays.bias_values[index, : len(values)] = values
    if p.frequency_penalty or p.presence_penalty or p.repetition_penalty != 1:
        history = row.token_ids[-arrays.history_ids.shape[1]:]
        arrays.history_ids[index, : len(history)] = history
        arrays.num_prompt_tokens[index] = row.num_prompt_tokens - (len(row.token_ids) - len(history))
    words = allowed_words(row, vocab_size)
    if words is not None:
        arrays.allowed_words[index] = words
