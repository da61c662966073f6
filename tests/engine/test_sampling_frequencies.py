"""Seeded draws of the fused sampler follow the distribution each parameter defines.

For every shaping parameter, 20,000 rows share one logits vector and differ only in their
seed; the observed token frequencies must match a NumPy construction of the definition
within five binomial standard errors per token (a chance failure about once in a million).
Each case runs twice: as the sampler runs it (rows that top-k, top-p or min-p narrow to
their best candidates take the narrow path) and with the narrow path off (one candidate,
so no cut above qualifies), which sends every row through the full-vocabulary path.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import engine.sampling.candidates
from engine.sampling import empty_sampling_arrays, sample
from engine.sampling.draw import CDF_BLOCK

VOCAB, DRAWS = 40, 20000
LOGITS = np.random.default_rng(0).normal(0, 1.5, VOCAB).astype(np.float32)


def softmax(x):
    e = np.exp(x - x[np.isfinite(x)].max())
    e[~np.isfinite(x)] = 0
    return e / e.sum()


def top_k(scaled, k):
    return scaled >= np.sort(scaled)[-k]


def kept_in_order(order, probs, p):
    """Tokens, taken in `order`, whose mass before them is < p (the nucleus rule)."""
    before = np.concatenate([[0], np.cumsum(probs[order])[:-1]])
    mask = np.zeros(VOCAB, bool)
    mask[order[before < p]] = True
    return mask


def top_p(scaled, p):
    probs = softmax(scaled)
    return kept_in_order(np.argsort(-probs), probs, p)


def min_p(scaled, m):
    probs = softmax(scaled)
    return probs >= m * probs.max()


def typical_p(scaled, p):
    probs = softmax(scaled)
    entropy = -(probs * np.log(probs)).sum()
    return kept_in_order(np.argsort(np.abs(-np.log(probs) - entropy)), probs, p)


def xtc_removed(scaled, threshold):
    probs = softmax(scaled)
    above = probs >= threshold
    mask = np.ones(VOCAB, bool)
    if above.sum() >= 2:
        mask[above & (probs > probs[above].min())] = False
    return mask


TEMPERATURE = 0.8
CASES = {
    "temperature": ({}, lambda s: softmax(s)),
    "top_k": ({"top_k": 5}, lambda s: softmax(np.where(top_k(s, 5), s, -np.inf))),
    "top_p": ({"top_p": 0.7}, lambda s: softmax(np.where(top_p(s, 0.7), s, -np.inf))),
    "min_p": ({"min_p": 0.1}, lambda s: softmax(np.where(min_p(s, 0.1), s, -np.inf))),
    "typical_p": ({"typical_p": 0.6}, lambda s: softmax(np.where(typical_p(s, 0.6), s, -np.inf))),
    "xtc": ({"xtc_threshold": 0.05, "xtc_probability": 0.4},
            lambda s: 0.6 * softmax(s) + 0.4 * softmax(np.where(xtc_removed(s, 0.05), s, -np.inf))),
}


@pytest.fixture(params=["as run", "full vocabulary"])
def sampler_path(request, monkeypatch):
    if request.param == "full vocabulary":
        monkeypatch.setattr(engine.sampling.candidates, "NUM_CANDIDATES", 1)
    return request.param


@pytest.mark.parametrize("name", list(CASES))
def test_draws_follow_the_definition(name, sampler_path):
    settings, expected_of = CASES[name]
    arrays = empty_sampling_arrays(DRAWS, VOCAB, history=4)
    arrays.temperature[:] = TEMPERATURE
    for field, value in settings.items():
        getattr(arrays, field)[:] = value
    rng = np.random.default_rng(list(CASES).index(name))
    arrays.seeds[:] = rng.integers(0, 2**31, DRAWS)
    arrays.positions[:] = rng.integers(0, 4096, DRAWS)
    tokens = np.asarray(jax.jit(sample)(np.tile(LOGITS, (DRAWS, 1)), arrays).tokens)
    expected = expected_of(LOGITS.astype(np.float64) / TEMPERATURE)
    observed = np.bincount(tokens, minlength=VOCAB) / DRAWS
    bound = 5 * np.sqrt(expected * (1 - expected) / DRAWS) + 1e-4
    assert np.all(observed[expected == 0] == 0), "a removed token was drawn"
    assert np.all(np.abs(observed - expected) <= bound), name


def test_draws_across_several_cdf_blocks():
    """A vocabulary spanning several CDF blocks, with mass in each and banned tokens between."""
    vocab = 3 * CDF_BLOCK + 17
    rng = np.random.default_rng(9)
    logits = np.full(vocab, -np.inf, np.float32)
    favoured = rng.choice(vocab, 30, replace=False)
    logits[favoured] = rng.normal(0, 1, 30)
    arrays = empty_sampling_arrays(DRAWS, vocab, history=4)
    arrays.temperature[:] = 1.0
    arrays.seeds[:] = rng.integers(0, 2**31, DRAWS)
    arrays.positions[:] = rng.integers(0, 4096, DRAWS)
    tokens = np.asarray(jax.jit(sample)(np.tile(logits, (DRAWS, 1)), arrays).tokens)
    expected = softmax(logits.astype(np.float64))
    observed = np.bincount(tokens, minlength=vocab) / DRAWS
    assert set(np.unique(tokens)) <= set(favoured.tolist())
    assert np.all(np.abs(observed - expected) <= 5 * np.sqrt(expected * (1 - expected) / DRAWS) + 1e-4)
