"""The full-vocabulary filters against plain NumPy references that sort the vocabulary.

Each reference states one definition (ties kept whole by threshold rules, see
engine/sampling/filters.py) in float64, and the filters must keep exactly the same tokens.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.sampling import filters
from engine.sampling.filters import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    apply_truncation,
    apply_typical_p,
    apply_xtc,
)

ROWS, VOCAB = 8, 500


def softmax64(row):
    row = row.astype(np.float64)
    e = np.exp(row - row.max())
    return e / e.sum()


def ref_top_k(row, k):
    if k <= 0 or k >= row.size:
        return np.ones(row.size, bool)
    kth = np.sort(row)[::-1][k - 1]
    return row >= kth


def ref_keep_by_mass(scores, probs, p):
    """HF-style: sort by score, first index whose inclusive cumsum reaches p, keep ties."""
    order = np.argsort(-scores, kind="stable")
    cumulative = np.cumsum(probs[order])
    last = min(int(np.sum(cumulative < p)), scores.size - 1)
    return scores >= scores[order][last]


def ref_top_p(row, p):
    if p >= 1.0:
        return np.ones(row.size, bool)
    return ref_keep_by_mass(row.astype(np.float64), softmax64(row), p)


def ref_min_p(row, min_p):
    probs = softmax64(row)
    return probs >= min_p * probs.max() if min_p > 0 else np.ones(row.size, bool)


def ref_typical_p(row, mass):
    if mass >= 1.0:
        return np.ones(row.size, bool)
    probs = softmax64(row)
    with np.errstate(divide="ignore"):
        log_probs = np.log(probs)
    entropy = -np.sum(np.where(probs > 0, probs * np.where(probs > 0, log_probs, 0), 0))
    return ref_keep_by_mass(-np.abs(-log_probs - entropy), probs, mass)


def ref_xtc(row, threshold, probability, uniform):
    keep = np.ones(row.size, bool)
    if not uniform < probability:
        return keep
    probs = softmax64(row)
    ranked = np.sort(probs)[::-1]
    top = ranked[ranked >= threshold]
    if top.size >= 2:
        keep &= ~((probs >= threshold) & (probs > top[-1]))
    return keep


def masked(row, keep):
    return np.where(keep, row, -np.inf).astype(np.float32)


def make_logits(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(ROWS, VOCAB)) * 3).astype(np.float32)
    logits[1] = np.round(logits[1])  # heavy ties everywhere
    logits[2, :4] = logits[2].max()  # a four-way tie at the top
    logits[3, rng.choice(VOCAB, 100, replace=False)] = -np.inf  # already masked tokens
    logits[5] = np.round(logits[5] * 2) / 2
    logits[6, 10:20] = np.sort(logits[6])[-30]  # ties straddling the k-th / nucleus boundary
    return logits


PARAMS = dict(
    top_k=np.array([0, 1, 5, 50, 500, 3, 25, 100], np.int32),
    top_p=np.array([1.0, 0.5, 0.9, 0.1, 0.99, 1e-6, 0.7, 1.0], np.float32),
    min_p=np.array([0, 0.1, 0.01, 0.5, 0, 0.05, 0.2, 1.0], np.float32),
    typical_p=np.array([1.0, 0.5, 0.9, 0.2, 0.95, 0.99, 1.0, 0.3], np.float32),
    xtc_threshold=np.array([0.1, 0.05, 0.2, 0.01, 0.6, 0.1, 0.02, 0.02], np.float32),
    xtc_probability=np.array([0, 1, 0.5, 1, 1, 0.3, 1, 1], np.float32),
    xtc_uniform=np.array([0.5, 0.2, 0.4, 0.9, 0.1, 0.1, 0.5, 0.0], np.float32),
)

FILTERS = {
    "top_k": (apply_top_k, ref_top_k, ["top_k"], lambda k: k <= 0 or k >= VOCAB),
    "top_p": (apply_top_p, ref_top_p, ["top_p"], lambda p: p >= 1.0),
    "min_p": (apply_min_p, ref_min_p, ["min_p"], lambda p: p <= 0),
    "typical_p": (apply_typical_p, ref_typical_p, ["typical_p"], lambda p: p >= 1.0),
    "xtc": (apply_xtc, ref_xtc, ["xtc_threshold", "xtc_probability", "xtc_uniform"], lambda t, p, u: not u < p),
}


def kept(out):
    return np.isfinite(np.asarray(out))


def assert_bit_exact(a, b):
    assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


@pytest.mark.parametrize("candidates", [256, 1], ids=["candidates", "bisection"])
@pytest.mark.parametrize("name", list(FILTERS))
def test_filter_matches_reference_under_jit(name, candidates, monkeypatch):
    """With one candidate, every active rank-based row falls back to the bisection."""
    monkeypatch.setattr(filters, "NUM_FAST_CANDIDATES", candidates)
    fn, ref, keys, is_off = FILTERS[name]
    logits = make_logits()
    args = [PARAMS[k] for k in keys]
    out = np.asarray(jax.jit(lambda *a: fn(*a))(jnp.asarray(logits), *map(jnp.asarray, args)))
    for r in range(ROWS):
        row_args = [a[r].item() for a in args]
        expected = ref(logits[r], *row_args) & np.isfinite(logits[r])
        np.testing.assert_array_equal(kept(out[r]), expected, err_msg=f"{name} row {r}")
        assert_bit_exact(out[r][expected], logits[r][expected])  # survivors untouched
        if is_off(*row_args):
            assert_bit_exact(out[r], logits[r])
    assert kept(out).any(axis=-1).all()


def test_filters_do_something():
    """Guard against a vacuous comparison: every filter removes tokens on some row."""
    logits = make_logits()
    for name, (fn, _, keys, _) in FILTERS.items():
        out = fn(jnp.asarray(logits), *[jnp.asarray(PARAMS[k]) for k in keys])
        assert kept(out).sum() < np.isfinite(logits).sum(), name


def test_combined_matches_chained_reference():
    logits = make_logits(1)
    out = np.asarray(jax.jit(apply_truncation)(jnp.asarray(logits), *map(jnp.asarray, PARAMS.values())))
    for r in range(ROWS):
        row = logits[r]
        row = masked(row, ref_top_k(row, PARAMS["top_k"][r]))
        row = masked(row, ref_top_p(row, PARAMS["top_p"][r]))
        row = masked(row, ref_min_p(row, PARAMS["min_p"][r]))
        row = masked(row, ref_typical_p(row, PARAMS["typical_p"][r]))
        xtc = [PARAMS[k][r] for k in ("xtc_threshold", "xtc_probability", "xtc_uniform")]
        row = masked(row, ref_xtc(row, *xtc))
        np.testing.assert_array_equal(kept(out[r]), np.isfinite(row), err_msg=f"row {r}")


def off_params(rows):
    return dict(
        top_k=jnp.zeros(rows, jnp.int32),
        top_p=jnp.ones(rows, jnp.float32),
        min_p=jnp.zeros(rows, jnp.float32),
        typical_p=jnp.ones(rows, jnp.float32),
        xtc_threshold=jnp.full(rows, 0.1, jnp.float32),
        xtc_probability=jnp.zeros(rows, jnp.float32),
        xtc_uniform=jnp.full(rows, 0.5, jnp.float32),
    )


def test_all_off_is_bit_exact():
    logits = jnp.asarray(make_logits())
    assert_bit_exact(jax.jit(apply_truncation)(logits, **off_params(ROWS)), logits)


def test_top_k_extremes():
    logits = make_logits()
    logits[[1, 2, 5]] = np.random.default_rng(4).normal(size=(3, VOCAB))  # unique maxima
    x = jnp.asarray(logits)
    one = kept(apply_top_k(x, jnp.ones(ROWS, jnp.int32)))
    np.testing.assert_array_equal(np.flatnonzero(one.reshape(-1)) % VOCAB, logits.argmax(-1))
    all_kept = apply_top_k(x, jnp.full(ROWS, VOCAB, jnp.int32))
    assert_bit_exact(all_kept, x)


def test_tiny_top_p_keeps_only_the_top_token():
    logits = make_logits(3)
    out = apply_top_p(jnp.asarray(logits), jnp.full(ROWS, 1e-7, jnp.float32))
    np.testing.assert_array_equal(kept(out), logits == logits.max(-1, keepdims=True))


def test_all_equal_logits():
    """A flat row: every rank-based filter must keep everything tied; XTC sees no top choice."""
    x = jnp.zeros((2, 64), jnp.float32)
    ones = jnp.ones(2, jnp.float32)
    assert kept(apply_top_k(x, jnp.array([1, 3], jnp.int32))).all()
    assert kept(apply_top_p(x, ones * 0.3)).all()
    assert kept(apply_min_p(x, ones * 0.9)).all()
    assert kept(apply_typical_p(x, ones * 0.3)).all()
    assert kept(apply_xtc(x, ones * 0.01, ones, ones * 0)).all()


def test_xtc_two_tokens_over_threshold():
    """Of the tokens over the threshold only the least probable survives."""
    x = jnp.log(jnp.array([[0.4, 0.3, 0.2, 0.1]], jnp.float32))
    one = jnp.ones(1, jnp.float32)
    np.testing.assert_array_equal(kept(apply_xtc(x, one * 0.25, one, one * 0.5)), [[False, True, True, True]])
    np.testing.assert_array_equal(kept(apply_xtc(x, one * 0.35, one, one * 0.5)), [[True] * 4])
    np.testing.assert_array_equal(kept(apply_xtc(x, one * 0.25, one * 0.4, one * 0.5)), [[True] * 4])


def sort_top_p(logits, top_p):
    """The sort-based nucleus filter, the plain definition to check the sort-free one against."""
    ranked = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(ranked, axis=-1)
    last = jnp.sum(jnp.cumsum(probs, axis=-1) - probs < top_p[:, None], axis=-1) - 1
    threshold = jnp.take_along_axis(ranked, last[:, None], axis=-1)
    return jnp.where(logits >= threshold, logits, -jnp.inf)


def test_top_p_agrees_with_a_full_sort_at_serving_size():
    """At 64 x 49,152, on flat logits (the bisection) and peaked ones (the candidates), the
    sort-free nucleus keeps what a sort keeps. Float32 sums in a different order may flip
    a token at the boundary, hence the tolerance. Speed is measured by tools/bench.py."""
    rows, vocab = 64, 49152
    normal = np.random.default_rng(0).normal(size=(rows, vocab)).astype(np.float32)
    top_p, p = jax.jit(apply_top_p), jnp.full(rows, 0.9, jnp.float32)
    for scale in (3.0, 8.0):
        logits = jnp.asarray(normal * scale)
        agree = kept(top_p(logits, p)) == kept(jax.jit(sort_top_p)(logits, p))
        assert agree.mean() > 0.9999
