"""engine/sampling/argmax.py: the greedy token in blocks, against jnp.argmax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.sampling.argmax import argmax


@pytest.mark.parametrize("vocab", [49_152, 96, 64, 1_000, 130])
def test_the_same_index_as_jnp_argmax(vocab):
    # Blocks of 128 (49,152), of 32 (96), one block (64); 1,000 and 130 have no block of 16
    # or more and go to jnp.argmax whole.
    values = jnp.asarray(np.random.default_rng(vocab).standard_normal((7, vocab)), jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(argmax)(values)), np.asarray(jnp.argmax(values, axis=-1)))


def test_the_first_index_on_ties_across_blocks_and_within_one():
    values = np.zeros((4, 512), np.float32)
    values[0, [300, 5]] = 2.0  # two blocks hold the largest: the earlier block's
    values[1, [130, 129]] = 2.0  # one block holds it twice: the earlier index
    values[2, [511, 384]] = 2.0  # the last block's first
    values[3] = -np.inf  # nothing but -inf: index 0, as jnp.argmax gives
    assert list(np.asarray(jax.jit(argmax)(jnp.asarray(values)))) == [5, 129, 384, 0]
