"""The sample step, fused into the same jit as the forward pass.

Greedy and temperature sampling, per row, with no Python branching on request values.
Randomness comes from (seed, position) alone, so a seeded request draws the same tokens
whatever else shares its batch. The full sampler (top-k/p, penalties, logprobs...) extends
this module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.batch import BatchInputs


def row_keys(seeds, positions):
    """One PRNG key per row, a function of that row's seed and sampling position only."""
    return jax.vmap(lambda seed, position: jax.random.fold_in(jax.random.key(seed), position))(seeds, positions)


def sample(logits, batch: BatchInputs):
    """Next token per row [seqs] from float32 logits [seqs, vocab]: greedy where temperature is 0."""
    greedy = jnp.argmax(logits, axis=-1)
    keys = row_keys(batch.seeds, batch.sample_positions)
    gumbel = jax.vmap(lambda key: jax.random.gumbel(key, logits.shape[-1:], jnp.float32))(keys)
    temperature = jnp.maximum(batch.temperature, 1e-6)[:, None]
    sampled = jnp.argmax(logits / temperature + gumbel, axis=-1)
    return jnp.where(batch.temperature > 0, sampled, greedy).astype(jnp.int32)
