"""Logits processors of the fused sampler: penalties, logit bias and the allowed-token mask.

Every function is pure and jit-friendly, works per row on float32 logits [rows, vocab] and takes
per-row parameter arrays, so a batch mixes requests freely with no Python branching on request
values. A disallowed token gets -inf. Padded id lists use -1, which never matches a token.
`processed_logits` runs them all in the sampler's order, each skipped when no row uses it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.sampling.arrays import SamplingArrays
from engine.sampling.masks import WORD_BITS


def _row_index(ids):
    """Row numbers broadcast against ids [rows, k], for scattering into [rows, vocab]."""
    return jnp.arange(ids.shape[0], dtype=jnp.int32)[:, None]


def _scatter_ids(ids, vocab_size):
    """ids with padding (-1) moved out of range, so scatters with mode="drop" skip it.

    A bare -1 would wrap around to the last token under numpy-style indexing."""
    return jnp.where(ids < 0, vocab_size, ids)


def count_tokens(token_ids, vocab_size: int):
    """How often each token occurs per row: int32 [rows, vocab] from int32 token_ids [rows, length].

    Padding (-1) and ids outside [0, vocab_size) are not counted. A scatter-add costs
    O(rows * length), where a one-hot sum would build [rows, length, vocab]."""
    counts = jnp.zeros((token_ids.shape[0], vocab_size), jnp.int32)
    ids = _scatter_ids(token_ids, vocab_size)
    return counts.at[_row_index(ids), ids].add(1, mode="drop")


def apply_penalties(logits, output_counts, context_present, frequency, presence, repetition):
    """Repetition, then frequency and presence penalties, per row.

    logits float32 [rows, vocab]; output_counts int32 [rows, vocab] over the generated tokens;
    context_present bool [rows, vocab] over prompt plus generated tokens; frequency, presence,
    repetition float32 [rows].

    repetition (HF / Keskar, 1 = off): a present token's logit is divided by r when positive,
    multiplied by r otherwise. frequency and presence (OpenAI, 0 = off):
    logit -= count * frequency + (count > 0) * presence. The order follows vLLM.
    Rows with all-neutral values come back bit-exact, and a batch with no penalty at all
    skips the work entirely."""
    logits = jnp.asarray(logits)
    frequency = jnp.asarray(frequency, logits.dtype)[:, None]
    presence = jnp.asarray(presence, logits.dtype)[:, None]
    repetition = jnp.asarray(repetition, logits.dtype)[:, None]
    uses_repetition = repetition != 1
    uses_additive = (frequency != 0) | (presence != 0)

    def penalize():
        penalized = jnp.where(logits > 0, logits / repetition, logits * repetition)
        out = jnp.where(context_present & uses_repetition, penalized, logits)
        counts = output_counts.astype(logits.dtype)
        additive = counts * frequency + (output_counts > 0).astype(logits.dtype) * presence
        # where, not a plain subtraction, keeps neutral rows bit-exact (e.g. -0.0 and NaN stay).
        return jnp.where(uses_additive, out - additive, out)

    return jax.lax.cond(jnp.any(uses_repetition | uses_additive), penalize, lambda: logits)


def apply_logit_bias(logits, bias_ids, bias_values):
    """Add bias_values float32 [rows, K] to the logits of bias_ids int32 [rows, K] (-1 = padding).

    A token listed twice in one row gets both biases added up; the host should merge duplicates
    if it wants OpenAI's one-value-per-token semantics."""
    ids = _scatter_ids(bias_ids, logits.shape[-1])
    values = jnp.asarray(bias_values, logits.dtype)
    return jnp.asarray(logits).at[_row_index(ids), ids].add(values, mode="drop")


def unpack_allowed(words, vocab_size: int):
    """bool [rows, vocab] from llguidance's packed int32 words [rows, ceil(vocab / 32)].

    Token t is allowed iff bit t % 32 of word t // 32 is set (least significant bit first)."""
    words = jnp.asarray(words, jnp.int32)
    # Shift every word by 0..31 at once (a broadcast, not a gather: gathers are slow on
    # XLA's CPU backend); the arithmetic shift smears the sign bit, masking with 1 drops it.
    bits = jnp.right_shift(words[:, :, None], jnp.arange(WORD_BITS, dtype=jnp.int32)) & 1
    return bits.reshape(words.shape[0], -1)[:, :vocab_size].astype(jnp.bool_)


def apply_allowed(logits, words):
    """Set tokens not allowed by the packed mask words int32 [rows, ceil(vocab / 32)] to -inf.

    A batch whose words are all -1 (everything allowed) skips the unpacking."""
    logits = jnp.asarray(logits)
    vocab_size = logits.shape[-1]

    def mask():
        return jnp.where(unpack_allowed(words, vocab_size), logits, -jnp.inf)

    return jax.lax.cond(jnp.any(words != -1), mask, lambda: logits)


def processed_logits(logits, arrays: SamplingArrays):
    """Logits after penalties, logit bias and the allowed-token mask, in that order."""
    vocab = logits.shape[-1]

    def with_penalties(logits):
        history = arrays.history_ids
        is_output = jnp.arange(history.shape[1])[None, :] >= arrays.num_prompt_tokens[:, None]
        output_counts = count_tokens(jnp.where(is_output, history, -1), vocab)
        present = count_tokens(history, vocab) > 0
        return apply_penalties(logits, output_counts, present, arrays.frequency_penalty,
                               arrays.presence_penalty, arrays.repetition_penalty)

    uses_penalties = jnp.any((arrays.frequency_penalty != 0) | (arrays.presence_penalty != 0)
                             | (arrays.repetition_penalty != 1))
    logits = jax.lax.cond(uses_penalties, with_penalties, lambda x: x, logits)
    # Skipped when no row has a bias: the scatter would copy the whole logits array.
    logits = jax.lax.cond(jnp.any(arrays.bias_ids >= 0),
                          lambda x: apply_logit_bias(x, arrays.bias_ids, arrays.bias_values), lambda x: x, logits)
    return apply_allowed(logits, arrays.allowed_words)
