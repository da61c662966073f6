"""Reading the sampler's arrays at indices that lie in bounds.

Every index the sampler gathers at is a top_k's, a sampled token's or a clipped one's. jnp's
default gather masks out-of-bounds reads, code that every bucket's program would repeat (and
XLA's gather clamps indices regardless), so the sampler promises them in bounds.
"""

from __future__ import annotations

import jax.numpy as jnp

IN_BOUNDS = "promise_in_bounds"


def take(values, index):
    """values[row, index[row]] for each row of values [rows, n]."""
    return jnp.take_along_axis(values, index[:, None].astype(jnp.int32), axis=-1, mode=IN_BOUNDS)[:, 0]
