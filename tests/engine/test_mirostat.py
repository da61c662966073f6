"""Mirostat v2 against a NumPy reference of llama.cpp's definition, and its feedback loop."""

from __future__ import annotations

import jax
import numpy as np

from engine.sampling.mirostat import initial_mu, mirostat_step

step = jax.jit(mirostat_step)


def np_mirostat_step(logits, tau, eta, mu, uniform):
    """llama.cpp mirostat_v2 for one row, float64; sampling by inverse CDF in vocab order."""
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    keep = -np.log2(probs) <= mu
    keep[np.argmax(logits)] = True
    kept = np.where(keep, probs, 0.0)
    kept /= kept.sum()
    cdf = np.cumsum(kept)
    token = int(np.argmax(cdf > uniform * cdf[-1]))
    surprise = -np.log2(kept[token])
    return token, mu - eta * (surprise - tau), keep, surprise


def zipf_logits(vocab=1000, exponent=1.1):
    """A fixed Zipf-like distribution, shuffled so token order says nothing of probability."""
    logits = -exponent * np.log(np.arange(1, vocab + 1, dtype=np.float64))
    return np.random.default_rng(7).permutation(logits).astype(np.float32)


def test_single_step_matches_numpy():
    rng = np.random.default_rng(0)
    rows, vocab = 5, 300
    logits = (rng.standard_normal((rows, vocab)) * 2).astype(np.float32)
    tau = np.array([3.0, 5.0, 2.0, 4.0, 0.5], np.float32)
    eta = np.array([0.1, 0.2, 0.1, 0.5, 1.0], np.float32)
    mu = np.array([6.0, 10.0, 5.0, 7.0, 0.1], np.float32)  # the last keeps only the top token
    uniform = rng.random(rows).astype(np.float32)

    tokens, new_mu, truncated = step(logits, tau, eta, mu, uniform)
    assert tokens.dtype == np.int32
    for row in range(rows):
        token, ref_mu, keep, _ = np_mirostat_step(logits[row], tau[row], eta[row], mu[row], uniform[row])
        assert np.array_equal(np.isfinite(np.asarray(truncated[row])), keep), row
        assert 1 < keep.sum() < vocab or row == rows - 1
        assert int(tokens[row]) == token, row
        np.testing.assert_allclose(float(new_mu[row]), ref_mu, rtol=1e-5, atol=1e-5)
    assert int(tokens[-1]) == logits[-1].argmax() and np.isfinite(truncated[-1]).sum() == 1


def test_rows_without_mirostat_are_untouched():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((3, 50)).astype(np.float32)
    mu = np.array([1.0, 2.0, 3.0], np.float32)
    uniform = rng.random(3).astype(np.float32)

    outputs = step(logits, np.array([0.0, 3.0, 0.0], np.float32), np.full(3, 0.1, np.float32), mu, uniform)
    _, new_mu, truncated = (np.asarray(x) for x in outputs)
    assert np.array_equal(new_mu[[0, 2]], mu[[0, 2]]) and new_mu[1] != mu[1]
    assert np.array_equal(truncated[[0, 2]], logits[[0, 2]])
    assert not np.isfinite(truncated[1]).all()

    # No row on: the lax.cond skip branch.
    outputs = step(logits, np.zeros(3, np.float32), np.full(3, 0.1, np.float32), mu, uniform)
    _, new_mu, truncated = (np.asarray(x) for x in outputs)
    assert np.array_equal(new_mu, mu) and np.array_equal(truncated, logits)


def test_initial_mu_is_twice_tau():
    np.testing.assert_allclose(initial_mu(np.array([0.0, 3.0, 5.0])), [0.0, 6.0, 10.0])


def run_steps(logits, tau, eta, mu, num_steps, seed):
    """Mirostat over a fixed distribution: observed surprise and mu per step, [steps, rows]."""
    batch = np.stack([logits] * len(tau))
    rng = np.random.default_rng(seed)
    rows = np.arange(len(tau))
    surprises, mus = [], []
    for _ in range(num_steps):
        tokens, new_mu, truncated = step(batch, tau, eta, mu, rng.random(len(tau)).astype(np.float32))
        truncated = np.asarray(truncated, np.float64)
        kept = np.exp(truncated - truncated.max(-1, keepdims=True))
        kept /= kept.sum(-1, keepdims=True)
        observed = -np.log2(kept[rows, np.asarray(tokens)])
        # The state update is exactly the documented feedback on the observed surprise.
        np.testing.assert_allclose(new_mu, mu - eta * (observed - tau), rtol=1e-4, atol=1e-4)
        surprises.append(observed)
        mu = np.asarray(new_mu)
        mus.append(mu)
    return np.array(surprises), np.array(mus)


def test_surprise_converges_to_target():
    """Rows at tau 3 and 5 bits on a Zipf-like distribution whose entropy (~6.8 bits) is far
    above both. Since mu moves by -eta * error, the mean error over a window is exactly
    -(change in mu) / (eta * window): a bounded mu forces the average surprise onto tau."""
    logits = zipf_logits()
    probs = np.exp(logits.astype(np.float64))
    probs /= probs.sum()
    entropy = -(probs * np.log2(probs)).sum()
    tau = np.array([3.0, 5.0], np.float32)
    eta = np.full(2, 0.1, np.float32)

    # From the standard start, and from mu = 20 bits, where nothing is truncated at first.
    surprises, mus = run_steps(logits, tau, eta, np.asarray(initial_mu(tau)), 300, seed=42)
    far_surprises, far_mus = run_steps(logits, tau, eta, np.full(2, 20.0, np.float32), 300, seed=43)

    for row in range(2):
        first = far_surprises[:10, row].mean()
        assert abs(first - entropy) < 1.0  # untruncated sampling sits near the entropy
        for late in (surprises[-100:, row].mean(), far_surprises[-100:, row].mean()):
            assert abs(late - tau[row]) < 0.3, (row, late)
            assert abs(late - tau[row]) < 0.2 * abs(first - tau[row]), (row, first, late)
        # mu settles into one band whichever start it had.
        settled, far_settled = mus[-100:, row], far_mus[-100:, row]
        assert settled.max() - settled.min() < 4.0 and far_settled.max() - far_settled.min() < 4.0
        assert abs(settled.mean() - far_settled.mean()) < 1.0, (settled.mean(), far_settled.mean())
        assert far_mus[0, row] > 19.0 and far_settled.max() < 15.0
