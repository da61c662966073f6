"""The sampler's narrow path (engine/sampling/candidates.py) against the full-vocabulary filters.

A row is narrowed only when its top-k, top-p or min-p cut provably keeps candidates alone;
for such rows, the filters run on the NUM_CANDIDATES candidates must keep exactly the
tokens the full-vocabulary filters keep, with the same logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from engine.sampling.arrays import empty_sampling_arrays
from engine.sampling.candidates import NUM_CANDIDATES, narrowing, shape_candidates
from engine.sampling.filters import apply_truncation

VOCAB = 2048
# (top_k, top_p, min_p, typical_p, xtc_probability) per row: narrowing and non-narrowing cuts.
ROW_PARAMS = [
    (5, 1.0, 0.0, 1.0, 0.0), (50, 0.9, 0.0, 1.0, 0.0), (200, 0.8, 0.02, 0.9, 1.0), (300, 1.0, 0.0, 1.0, 0.0),
    (0, 0.5, 0.0, 1.0, 0.0), (0, 0.9, 0.0, 0.95, 1.0), (0, 0.999999, 0.0, 1.0, 0.0), (0, 1.0, 0.3, 1.0, 0.0),
    (0, 1.0, 1e-9, 1.0, 0.0), (0, 0.999999, 0.2, 0.9, 0.0), (0, 1.0, 0.0, 0.9, 0.0), (0, 1.0, 0.0, 1.0, 0.0),
]


def arrays_for(params):
    arrays = empty_sampling_arrays(len(params), VOCAB, history=4)
    for row, (k, p, m, typical, xtc) in enumerate(params):
        arrays.top_k[row], arrays.top_p[row], arrays.min_p[row] = k, p, m
        arrays.typical_p[row], arrays.xtc_probability[row] = typical, xtc
    arrays.temperature[:] = 1.0
    arrays.xtc_threshold[:] = 0.05
    return arrays


def narrow_and_full(logits, arrays):
    """(narrowed rows, the narrow path's logits scattered to the vocabulary, the full path's)."""
    uniform = jnp.zeros(logits.shape[0], jnp.float32)  # XTC applies wherever it is on

    @jax.jit
    def run(logits, arrays):
        values, ids = jax.lax.top_k(logits, NUM_CANDIDATES)
        cuts = narrowing(values, logits, arrays.top_k, arrays.top_p, arrays.min_p)
        shaped = shape_candidates(values, arrays, cuts, uniform)
        rows = jnp.arange(logits.shape[0])[:, None]
        scattered = jnp.full_like(logits, -jnp.inf).at[rows, ids].set(shaped)
        full = apply_truncation(logits, arrays.top_k, arrays.top_p, arrays.min_p, arrays.typical_p,
                                arrays.xtc_threshold, arrays.xtc_probability, uniform)
        return (cuts.by_k, cuts.by_p, cuts.by_min_p), scattered, full

    return run(logits, arrays)


def test_narrowed_rows_keep_exactly_what_the_full_filters_keep():
    logits = np.random.default_rng(0).normal(0, 3, (len(ROW_PARAMS), VOCAB)).astype(np.float32)
    (by_k, by_p, by_min_p), narrow, full = narrow_and_full(logits, arrays_for(ROW_PARAMS))
    narrowed = np.asarray(by_k | by_p | by_min_p)
    assert by_k.any() and by_p.any() and by_min_p.any(), "each cut narrows some row"
    assert (~narrowed).any(), "some rows must take the full path"
    assert not narrowed[3] and not narrowed[10] and not narrowed[11], "k > NUM_CANDIDATES, typical alone, nothing"
    narrow, full = np.asarray(narrow)[narrowed], np.asarray(full)[narrowed]
    assert np.array_equal(np.isfinite(narrow), np.isfinite(full))
    np.testing.assert_array_equal(narrow[np.isfinite(narrow)], full[np.isfinite(full)])


def test_a_cut_tied_with_the_last_candidate_is_not_narrowed():
    """All tokens equal: top_k 5 keeps every tied token, far more than the candidates."""
    logits = np.zeros((2, VOCAB), np.float32)
    logits[1, :3] = 1.0  # three clear leaders: top_k 3 fits
    arrays = arrays_for([(5, 1.0, 0.0, 1.0, 0.0), (3, 1.0, 0.0, 1.0, 0.0)])
    (by_k, _, _), narrow, full = narrow_and_full(logits, arrays)
    assert not by_k[0] and by_k[1]
    assert np.isfinite(np.asarray(full)[0]).all()
    assert np.array_equal(np.isfinite(np.asarray(narrow)[1]), np.isfinite(np.asarray(full)[1]))
