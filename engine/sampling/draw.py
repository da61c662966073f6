"""Drawing the token: per-row uniforms and the inverse-CDF draw both sampling paths use.

Randomness comes from (seed, position) alone, so a seeded request draws the same tokens
whatever else is in its batch, and the n choices of one request differ by their seeds.
It is a counter hash (murmur3's 32-bit finalizer, chained over seed, position, stream and
index) rather than jax.random's threefry: threefry's twenty rounds, twice (fold_in, then
the bits), came to 750 of a compiled step's 7,300 HLO instructions, and every bucket's
executable held their code (3.7 MiB each). tests/engine/test_sampling_basic.py checks the
draws' statistics, over consecutive positions of one seed too.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.sampling.gather import IN_BOUNDS, take

CDF_BLOCK = 256  # tokens per block of the two-level inverse-CDF search


@jax.tree_util.register_dataclass
@dataclass
class Draw:
    """What a sampling path decides for each row."""

    tokens: jax.Array  # [rows] i32
    mirostat_mu: jax.Array  # [rows] f32, the state for the next step
    sampling_logprob: jax.Array  # [rows] f32, the token's logprob under the processed distribution


def _mixed(x):
    """murmur3's 32-bit finalizer: a bijection on uint32 whose every output bit depends on
    every input bit."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def row_uniforms(seeds, positions, num: int, stream: int = 0):
    """`num` uniform draws per row [rows, num] in (0, 1), a function of that row's seed and
    position (and `stream`, so that two uses of one row's randomness differ) only."""
    row = _mixed(_mixed(seeds.astype(jnp.uint32) ^ jnp.uint32(0x9E3779B9 * (stream + 1) & 0xFFFFFFFF))
                 ^ positions.astype(jnp.uint32))
    counters = jnp.arange(num, dtype=jnp.uint32)
    bits = _mixed(_mixed(row[:, None] + counters[None, :] * jnp.uint32(0x9E3779B9)))
    # The top 24 bits, centred in their step: never 0 or 1, which log(-log u) cannot take.
    return ((bits >> 8).astype(jnp.float32) + 0.5) * (1.0 / (1 << 24))


def inverse_cdf_draw(logits, uniform):
    """One index per row from softmax(logits) [rows, n], at a uniform draw [rows] per row.

    Two levels instead of one cumulative sum over the vocabulary (slow on XLA's CPU
    backend): find the block of CDF_BLOCK tokens whose mass holds the draw, then the token
    within it. Zero-probability tokens are never picked."""
    rows, vocab = logits.shape
    probs = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))  # unnormalized: the draw scales
    num_blocks = -(-vocab // CDF_BLOCK)
    blocks = jnp.pad(probs, ((0, 0), (0, num_blocks * CDF_BLOCK - vocab))).reshape(rows, num_blocks, CDF_BLOCK)
    block_cdf = jnp.cumsum(blocks.sum(-1), axis=-1)  # [rows, blocks]
    target = uniform * block_cdf[:, -1]
    block = jnp.minimum(jnp.sum(block_cdf < target[:, None], axis=-1), num_blocks - 1)
    mass_before = jnp.where(block > 0, take(block_cdf, jnp.maximum(block - 1, 0)), 0.0)
    inner = jnp.take_along_axis(blocks, block[:, None, None], axis=1, mode=IN_BOUNDS)[:, 0]  # [rows, CDF_BLOCK]
    within = jnp.sum(mass_before[:, None] + jnp.cumsum(inner, axis=-1) < target[:, None], axis=-1)
    # Rounding can carry the draw past the block's last token with probability: stop there.
    last_nonzero = CDF_BLOCK - 1 - jnp.argmax((inner > 0)[:, ::-1], axis=-1)
    token = block * CDF_BLOCK + jnp.minimum(within, last_nonzero)
    return jnp.minimum(token, vocab - 1).astype(jnp.int32)
