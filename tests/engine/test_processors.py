"""The jit-side logits processors against independent NumPy definitions and hand-worked numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.sampling.processors import (apply_allowed, apply_logit_bias, apply_penalties, count_tokens,
                                        unpack_allowed)

ROWS, VOCAB = 6, 300
RNG = np.random.default_rng(7)


def random_logits(rows=ROWS, vocab=VOCAB, scale=3.0):
    return (RNG.standard_normal((rows, vocab)) * scale).astype(np.float32)


def padded_ids(rows=ROWS, length=40, vocab=VOCAB):
    """Random ids with a different amount of -1 padding per row (row 0 fully padded)."""
    ids = RNG.integers(0, vocab, (rows, length)).astype(np.int32)
    ids[0] = -1
    for row in range(1, rows):
        ids[row, length - 3 * row:] = -1
    return ids


def reference_counts(ids, vocab):
    counts = np.zeros((ids.shape[0], vocab), np.int32)
    for row in range(ids.shape[0]):
        for token in ids[row]:
            if token >= 0:
                counts[row, token] += 1
    return counts


def reference_penalties(logits, counts, present, frequency, presence, repetition):
    out = logits.copy()
    for row in range(out.shape[0]):
        for token in range(out.shape[1]):
            value = out[row, token]
            if present[row, token] and repetition[row] != 1:
                value = value / repetition[row] if value > 0 else value * repetition[row]
            value = value - counts[row, token] * frequency[row] - (counts[row, token] > 0) * presence[row]
            out[row, token] = value
    return out


def reference_allowed(words, vocab):
    bits = np.zeros((words.shape[0], vocab), bool)
    for row in range(words.shape[0]):
        for token in range(vocab):
            word = int(words[row, token // 32]) & 0xFFFFFFFF
            bits[row, token] = (word >> (token % 32)) & 1 == 1
    return bits


def test_count_tokens_ignores_padding():
    ids = padded_ids()
    counts = np.asarray(jax.jit(count_tokens, static_argnums=1)(ids, VOCAB))
    assert np.array_equal(counts, reference_counts(ids, VOCAB))
    assert counts[0].sum() == 0 and counts[1].sum() == (ids[1] >= 0).sum()
    assert counts[:, VOCAB - 1].sum() == (ids == VOCAB - 1).sum()  # -1 must not wrap to the last id


def test_penalties_hand_worked():
    # logits [2, -2, 1]; output [0, 0, 2] -> counts [2, 0, 1]; prompt [1] -> all three present.
    # repetition 2 first: 2 / 2 = 1, -2 * 2 = -4, 1 / 2 = 0.5.
    # then frequency .5, presence .25: 1 - 2*.5 - .25 = -0.25; -4 - 0 - 0 = -4; 0.5 - .5 - .25 = -0.25.
    logits = np.array([[2.0, -2.0, 1.0]], np.float32)
    counts = count_tokens(jnp.array([[0, 0, 2]], jnp.int32), 3)
    present = count_tokens(jnp.array([[1, 0, 0, 2]], jnp.int32), 3) > 0
    out = apply_penalties(logits, counts, present, jnp.array([0.5]), jnp.array([0.25]), jnp.array([2.0]))
    assert np.allclose(np.asarray(out), [[-0.25, -4.0, -0.25]], rtol=1e-6)
    # Repetition alone touches a prompt-only token (id 1) too; frequency alone does not.
    rep_only = apply_penalties(logits, counts, present, jnp.zeros(1), jnp.zeros(1), jnp.array([2.0]))
    assert np.allclose(np.asarray(rep_only), [[1.0, -4.0, 0.5]])
    freq_only = apply_penalties(logits, counts, present, jnp.array([0.5]), jnp.zeros(1), jnp.ones(1))
    assert np.allclose(np.asarray(freq_only), [[1.0, -2.0, 0.5]])


def test_penalties_match_reference_and_leave_neutral_rows_bit_exact():
    logits = random_logits()
    logits[2, :5] = [0.0, -0.0, -np.inf, 1e-30, -1e-30]  # edge values a neutral row must keep as is
    output_ids, prompt_ids = padded_ids(), padded_ids(length=30)
    counts = reference_counts(output_ids, VOCAB)
    present = (counts + reference_counts(prompt_ids, VOCAB)) > 0
    frequency = np.array([0.5, 0.0, 0.0, -0.3, 1.2, 0.0], np.float32)
    presence = np.array([0.25, 0.0, 0.0, 0.7, 0.0, 0.0], np.float32)
    repetition = np.array([1.3, 1.0, 1.0, 0.8, 1.0, 2.0], np.float32)
    out = np.asarray(jax.jit(apply_penalties)(logits, counts, present, frequency, presence, repetition))
    assert np.allclose(out, reference_penalties(logits, counts, present, frequency, presence, repetition),
                       rtol=1e-6, atol=0)
    assert np.array_equal(out[1:3].view(np.uint32), logits[1:3].view(np.uint32))
    assert not np.array_equal(out[[0, 3, 4, 5]], logits[[0, 3, 4, 5]])


def test_penalties_all_neutral_batch_is_untouched():
    logits = random_logits()
    counts = reference_counts(padded_ids(), VOCAB)
    out = jax.jit(apply_penalties)(logits, counts, counts > 0, np.zeros(ROWS, np.float32),
                                   np.zeros(ROWS, np.float32), np.ones(ROWS, np.float32))
    assert np.array_equal(np.asarray(out).view(np.uint32), logits.view(np.uint32))


def test_logit_bias_matches_reference_and_ignores_padding():
    logits = random_logits()
    ids = RNG.integers(0, VOCAB, (ROWS, 5)).astype(np.int32)
    ids[:, 3:] = -1
    ids[1] = -1
    values = RNG.uniform(-100, 100, (ROWS, 5)).astype(np.float32)
    expected = logits.copy()
    for row in range(ROWS):
        for token, value in zip(ids[row], values[row]):
            if token >= 0:
                expected[row, token] += value
    out = np.asarray(jax.jit(apply_logit_bias)(logits, ids, values))
    assert np.allclose(out, expected, rtol=1e-6)
    assert np.array_equal(out[1], logits[1])


def test_logit_bias_plus_100_forces_and_minus_100_bans():
    logits = random_logits()
    target = RNG.integers(0, VOCAB, ROWS).astype(np.int32)
    ids = np.stack([target, np.full(ROWS, -1, np.int32)], axis=1)
    forced = apply_logit_bias(logits, ids, np.array([[100.0, 5.0]] * ROWS, np.float32))
    assert np.array_equal(np.asarray(jnp.argmax(forced, -1)), target)
    winners = logits.argmax(-1).astype(np.int32)
    ids = np.stack([winners, np.full(ROWS, -1, np.int32)], axis=1)
    banned = apply_logit_bias(logits, ids, np.full((ROWS, 2), -100.0, np.float32))
    assert not np.any(np.asarray(jnp.argmax(banned, -1)) == winners)


@pytest.mark.parametrize("vocab", [300, 320, 33, 1])
def test_unpack_allowed_matches_bit_reference(vocab):
    num_words = -(-vocab // 32)
    words = RNG.integers(-2**31, 2**31, (ROWS, num_words), dtype=np.int64).astype(np.int32)
    words[0] = -1  # all allowed
    words[1] = 0  # nothing allowed
    words[2] = np.int32(-2**31)  # only bit 31 of each word: tokens 31, 63, ...
    unpacked = np.asarray(jax.jit(unpack_allowed, static_argnums=1)(words, vocab))
    assert unpacked.shape == (ROWS, vocab)
    assert np.array_equal(unpacked, reference_allowed(words, vocab))
    assert unpacked[0].all() and not unpacked[1].any()
    assert np.array_equal(np.flatnonzero(unpacked[2]), np.arange(31, vocab, 32))


def test_apply_allowed_masks_to_minus_inf_and_all_ones_is_identity():
    logits = random_logits()
    words = RNG.integers(-2**31, 2**31, (ROWS, -(-VOCAB // 32)), dtype=np.int64).astype(np.int32)
    words[3] = -1
    out = np.asarray(jax.jit(apply_allowed)(logits, words))
    assert np.array_equal(out, np.where(reference_allowed(words, VOCAB), logits, -np.inf))
    assert np.array_equal(out[3], logits[3])
    everything = np.asarray(jax.jit(apply_allowed)(logits, np.full_like(words, -1)))
    assert np.array_equal(everything, logits)
