"""Host side of the sampling step: one sequence's request and state written into its row.

Every declared per-row parameter (params.py) is copied generically from SamplingParams;
what follows by hand is what is not one value per row: the logit bias list, the token
history the penalties read, the packed allowed-token mask (engine/sampling/masks.py, with
the grammar's mask from engine/host/grammar_masks.py), the Mirostat state and where the row's
randomness comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.sampling.arrays import SamplingArrays
from engine.sampling.masks import bad_word_bans, force_token, no_repeat_ngram_bans, pack_banned, stop_bans
from engine.sampling.params import MAX_LOGIT_BIAS, SamplingParams


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
    grammar_words: np.ndarray | None = None  # [ceil(vocab / 32)] i32: what the grammar allows next
    # A thinking section's (engine/text/reasoning.py): the token its budget forces, the tags banned.
    forced_token_id: int | None = None
    banned_token_ids: frozenset[int] = frozenset()
    beam_mode: int = 0  # a beam row's search type (engine/sampling/beams.py); 0: it samples


def fill_row(arrays: SamplingArrays, index: int, row: RowSampling, position: int, vocab_size: int) -> None:
    """Write `row` into row `index` of host arrays made by empty_sampling_arrays;
    `position` is that of the token being sampled."""
    params = row.params
    for name, values in arrays.rows.items():
        values[index] = getattr(params, name)
    arrays.mirostat_mu[index] = row.mirostat_mu
    arrays.seeds[index] = row.seed
    arrays.positions[index] = position
    arrays.want_logprobs[index] = params.logprobs is not None
    arrays.beam_mode[index] = row.beam_mode
    if params.logit_bias:
        ids, values = zip(*params.logit_bias[:MAX_LOGIT_BIAS])
        arrays.bias_ids[index, : len(ids)] = ids
        arrays.bias_values[index, : len(values)] = values
    if params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1:
        _fill_history(arrays, index, row)
    words = row_allowed_words(row, vocab_size)
    if words is not None:
        arrays.allowed_words[index] = words


def _fill_history(arrays: SamplingArrays, index: int, row: RowSampling) -> None:
    """The row's latest token ids, as many as the history holds, for the penalties."""
    history = row.token_ids[-arrays.history_ids.shape[1]:]
    arrays.history_ids[index, : len(history)] = history
    arrays.num_prompt_tokens[index] = row.num_prompt_tokens - (len(row.token_ids) - len(history))


def row_allowed_words(row: RowSampling, vocab_size: int) -> list[int] | np.ndarray | None:
    """The row's packed mask, or None when it allows every token.

    A grammar's mask is intersected with the row's bans, unless that would leave no token
    at all (the grammar may allow only EOS while min_tokens still bans it): then the
    grammar wins, since the output must stay valid."""
    params, outputs = row.params, row.token_ids[row.num_prompt_tokens:]
    if len(outputs) < len(params.forced_output_tokens):
        return force_token(params.forced_output_tokens[len(outputs)], vocab_size)
    if row.forced_token_id is not None:
        return force_token(row.forced_token_id, vocab_size)
    banned = stop_bans(len(outputs), row.min_tokens, len(row.token_ids),
                       row.min_total_tokens or None, row.end_token_ids) | row.banned_token_ids
    if params.bad_word_tokens:
        banned |= bad_word_bans(outputs, [list(p) for p in params.bad_word_tokens])
    if params.no_repeat_ngram_size:
        banned |= no_repeat_ngram_bans(row.token_ids, params.no_repeat_ngram_size)
    if row.grammar_words is None:
        return pack_banned(banned, vocab_size) if banned else None
    if not banned:
        return row.grammar_words
    both = row.grammar_words & np.array(pack_banned(banned, vocab_size), np.int32)
    return both if both.any() else row.grammar_words
