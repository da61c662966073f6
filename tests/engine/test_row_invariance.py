"""The jnp ops of a step that reduce over a row keep the row's result the same bits whatever
shares the array: XLA orders its own reductions by the array's shape, and a last-bit
difference there becomes a step of 2^-8 once the next product rounds its inputs to bfloat16
(engine/device/native/blocks.h)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from engine.models.layers import ordered_sum, rms_norm


@pytest.mark.parametrize("width", [576, 2048])
def test_rms_norm_of_a_row_is_the_same_bits_among_any_rows(width):
    rng = np.random.default_rng(width)
    weight = rng.standard_normal(width).astype(np.float32)
    norm = jax.jit(lambda x: rms_norm(x, weight, 1e-5))
    rows = rng.standard_normal((3, width)).astype(np.float32) * 4
    alone = np.stack([np.asarray(norm(row[None]))[0] for row in rows])
    for count in (1, 2, 3, 5, 8, 16, 19, 33, 40, 64):
        x = rng.standard_normal((count, width)).astype(np.float32) * 4
        where = rng.choice(count, size=min(3, count), replace=False)
        x[where] = rows[:len(where)]
        assert (np.asarray(norm(x))[where] == alone[:len(where)]).all(), f"among {count} rows"


def test_ordered_sum_is_the_sum():
    x = np.random.default_rng(0).standard_normal((5, 576)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ordered_sum(x)), x.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-4)
