"""Sampled-token and prompt log probabilities against an independent NumPy reference."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from engine.sampling.logprobs import log_softmax, prompt_logprobs, token_logprobs

ROWS, VOCAB, NUM_TOP = 6, 400, 5


def np_log_softmax(x):
    """float64 log softmax; -inf entries stay -inf."""
    x = x.astype(np.float64)
    peak = x.max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return x - peak - np.log(np.exp(x - peak).sum(-1, keepdims=True))


def np_top(logprobs, k):
    ids = np.argsort(-logprobs, axis=-1, kind="stable")[:, :k]
    return ids, np.take_along_axis(logprobs, ids, axis=-1)


def random_case(seed=0):
    rng = np.random.default_rng(seed)
    model = (rng.standard_normal((ROWS, VOCAB)) * 3).astype(np.float32)
    # Processed logits: temperature-scaled, then a truncation mask per row.
    sampling = model / 0.7
    masked = rng.random((ROWS, VOCAB)) < 0.5
    sampling = np.where(masked, -np.inf, sampling).astype(np.float32)
    tokens = rng.integers(0, VOCAB, ROWS).astype(np.int32)
    return model, sampling, masked, tokens


@pytest.mark.parametrize("jit", [False, True])
def test_token_logprobs_match_numpy(jit):
    model, sampling, masked, tokens = random_case()
    fn = functools.partial(token_logprobs, num_top=NUM_TOP)
    out = (jax.jit(fn) if jit else fn)(model, sampling, tokens)

    ref = np_log_softmax(model)
    rows = np.arange(ROWS)
    np.testing.assert_allclose(out.logprob, ref[rows, tokens], atol=1e-5, rtol=1e-5)

    ref_sampling = np_log_softmax(sampling)[rows, tokens]
    assert masked[rows, tokens].any() and (~masked[rows, tokens]).any(), "case covers both"
    assert np.array_equal(np.isneginf(out.sampling_logprob), masked[rows, tokens])
    finite = ~masked[rows, tokens]
    np.testing.assert_allclose(np.asarray(out.sampling_logprob)[finite], ref_sampling[finite],
                               atol=1e-5, rtol=1e-5)

    ids, top = np_top(ref, NUM_TOP)
    assert out.top_ids.dtype == np.int32 and out.top_ids.shape == (ROWS, NUM_TOP)
    assert np.array_equal(out.top_ids, ids)
    np.testing.assert_allclose(out.top_logprobs, top, atol=1e-5, rtol=1e-5)
    assert np.all(np.diff(np.asarray(out.top_logprobs), axis=-1) <= 0)

    ref_rank = (model > model[rows, tokens][:, None]).sum(-1) + 1
    assert np.array_equal(out.rank, ref_rank)


def test_rank_one_and_top_token_agree_for_the_argmax():
    model, sampling, _, _ = random_case(1)
    argmax = model.argmax(-1).astype(np.int32)
    out = token_logprobs(model, model, argmax, num_top=1)
    assert np.array_equal(out.rank, np.ones(ROWS))
    assert np.array_equal(out.top_ids[:, 0], argmax)
    np.testing.assert_allclose(out.logprob, out.sampling_logprob, atol=1e-6)


def test_masked_logits_never_give_nan():
    logits = np.array([[0.0, -np.inf, 1.0, -np.inf], [-np.inf] * 4], np.float32)
    out = np.asarray(log_softmax(logits))
    assert not np.isnan(out).any()
    assert np.isneginf(out[1]).all() and np.isneginf(out[0, [1, 3]]).all()
    np.testing.assert_allclose(np.exp(out[0]).sum(), 1.0, rtol=1e-6)


def test_num_top_zero_gives_empty_arrays():
    model, sampling, _, tokens = random_case()
    out = jax.jit(token_logprobs, static_argnums=3)(model, sampling, tokens, 0)
    assert out.top_ids.shape == (ROWS, 0) and out.top_logprobs.shape == (ROWS, 0)


def test_prompt_logprobs_match_numpy():
    rng = np.random.default_rng(2)
    num_tokens = 9
    logits = (rng.standard_normal((num_tokens, VOCAB)) * 2).astype(np.float32)
    next_ids = rng.integers(0, VOCAB, num_tokens).astype(np.int32)
    greedy_at = np.array([0, 3, 8])
    next_ids[greedy_at] = logits[greedy_at].argmax(-1)

    out = jax.jit(prompt_logprobs, static_argnums=2)(logits, next_ids, NUM_TOP)

    ref = np_log_softmax(logits)
    positions = np.arange(num_tokens)
    np.testing.assert_allclose(out.logprob, ref[positions, next_ids], atol=1e-5, rtol=1e-5)
    ids, top = np_top(ref, NUM_TOP)
    assert np.array_equal(out.top_ids, ids)
    np.testing.assert_allclose(out.top_logprobs, top, atol=1e-5, rtol=1e-5)
    expected_greedy = logits.argmax(-1) == next_ids
    assert expected_greedy.sum() == len(greedy_at)
    assert np.array_equal(out.is_greedy, expected_greedy)
    assert np.array_equal(np.asarray(out.rank) == 1, expected_greedy)
