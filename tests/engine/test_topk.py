"""engine/sampling/topk.py against lax.top_k: the same values, and indices that hold those values."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from engine.sampling.topk import top_k


@pytest.mark.parametrize("n, k", [(49152, 256), (49152, 20), (5000, 20), (1000, 7), (300, 256)])
def test_values_equal_lax_top_k_and_indices_point_at_them(n, k):
    rng = np.random.default_rng(n + k)
    x = rng.normal(0, 3, (6, n)).astype(np.float32)
    x[1] = np.round(x[1])  # many ties, at the k-th value too
    x[2, rng.choice(n, n // 2, replace=False)] = -np.inf  # masked tokens
    x[3, : n - 3] = -np.inf  # fewer than k finite entries
    values, indices = jax.jit(top_k, static_argnums=1)(x, k)
    expected, _ = jax.lax.top_k(x, k)
    np.testing.assert_array_equal(values, expected)
    assert indices.dtype == np.int32 and np.all((0 <= indices) & (indices < n))
    finite = np.isfinite(values)
    np.testing.assert_array_equal(np.take_along_axis(x, np.asarray(indices), -1)[finite], np.asarray(values)[finite])
    for row in range(x.shape[0]):  # no entry twice among the finite ones
        kept = np.asarray(indices[row])[finite[row]]
        assert len(set(kept.tolist())) == len(kept)
