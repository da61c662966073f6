"""The kernel's work list: which query tiles of which sequence each program computes.

A step's tokens are ragged: a decode row has one token, a prompt chunk hundreds. The
kernel's grid cannot follow that (it is static), so the host-free jnp below turns the batch
into a fixed-length list of work items, one per tile of at most `tile_tokens` consecutive
tokens of one sequence. The list's length bounds every batch of the bucket: each row adds
at most one partial tile to the `tokens / tile_tokens` full ones. Items past the real ones
carry zero tokens, and their programs return at once.

A row's tokens lie next to each other in the batch (engine/device/runner.py `token_spans`) at
consecutive positions, so an item is four numbers: the row (its block table), its first
token, how many tokens, and the position of the first."""

from __future__ import annotations

import jax
import jax.numpy as jnp

ROW, FIRST_TOKEN, NUM_TOKENS, FIRST_POSITION = range(4)


def num_work_items(num_tokens: int, num_rows: int, tile_tokens: int) -> int:
    return -(-num_tokens // tile_tokens) + num_rows


def row_spans(token_rows, positions, num_rows: int):
    """Each row's (first token, token count, first position); rows without tokens get 0s."""
    num_tokens = token_rows.shape[0]
    real = token_rows >= 0
    segments = jnp.where(real, token_rows, num_rows)  # padding goes to a dropped segment
    counts = jax.ops.segment_sum(real.astype(jnp.int32), segments, num_segments=num_rows + 1)[:num_rows]
    firsts = jax.ops.segment_min(jnp.arange(num_tokens, dtype=jnp.int32), segments,
                                 num_segments=num_rows + 1)[:num_rows]
    firsts = jnp.where(counts > 0, firsts, 0)
    return firsts, counts, jnp.where(counts > 0, positions[firsts], 0)


def work_items(token_rows, positions, num_rows: int, tile_tokens: int) -> jax.Array:
    """[items, 4] int32: (row, first token, tokens, first position) of every query tile."""
    firsts, counts, first_positions = row_spans(token_rows, positions, num_rows)
    tiles = -(-counts // tile_tokens)
    ends = jnp.cumsum(tiles)
    num_items = num_work_items(token_rows.shape[0], num_rows, tile_tokens)
    item = jnp.arange(num_items, dtype=jnp.int32)
    row = jnp.minimum(jnp.searchsorted(ends, item, side="right"), num_rows - 1).astype(jnp.int32)
    tile_in_row = item - (ends[row] - tiles[row])
    offset = tile_in_row * tile_tokens
    tokens = jnp.where(item < ends[-1], jnp.clip(counts[row] - offset, 0, tile_tokens), 0)
    return jnp.stack([row, firsts[row] + offset, tokens, first_positions[row] + offset], axis=1).astype(jnp.int32)
