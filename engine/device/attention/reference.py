"""Attention over a ragged batch and a paged KV cache, in plain jnp.

Each token attends to two sets of keys, merged with the online-softmax rule:
- its sequence's earlier tokens, read from the cache a block of pages at a time (positions
  below the token's `context_lens`); the loop runs only as many blocks as the longest
  context in the batch needs, so a short batch never pays for max_model_len;
- the tokens of its own sequence in this step (causal), taken straight from the fresh
  keys and values, so a prompt's first chunk reads no cache at all.
Masked keys add exact zeros, so a token's result does not depend on what else is batched.

Two features of some families (engine/models/): a sliding window, where a token at position
p sees only keys at positions above p - window (the loop over cached blocks starts at the
first block any token of the step still sees), and soft-capping, where each score s
becomes cap * tanh(s / cap) before the softmax.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.device.kv_cache import readable

NEG_INF = -jnp.inf
BLOCK_TOKENS = 128  # cached keys read per loop iteration (rounded to whole pages)


def merge_softmax(a, b):
    """Combine two partial softmax states (running max, normaliser, weighted sum)."""
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = jnp.maximum(m_a, m_b)
    # Both empty (m = -inf): shift by 0 so the scales are exp(-inf) = 0, not NaN.
    shift = jnp.where(jnp.isfinite(m), m, 0.0)
    scale_a, scale_b = jnp.exp(m_a - shift), jnp.exp(m_b - shift)
    return m, l_a * scale_a + l_b * scale_b, acc_a * scale_a[..., None] + acc_b * scale_b[..., None]


def partial_softmax(scores, mask, values_einsum, softcap=None):
    """Softmax state of masked scores [t, kv, group, keys]; values_einsum(p) gives the sum."""
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    scores = jnp.where(mask, scores, NEG_INF)
    m = scores.max(-1)
    # A row with no valid key keeps m = -inf; shift by 0 there so exp() gives zeros, not NaN.
    p = jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0)[..., None])
    p = jnp.where(mask, p, 0.0)
    return m, p.sum(-1), values_einsum(p)


def attend_to_step(q, k, v, positions, token_rows, first_keys, softcap=None):
    """Causal attention among the tokens of this step, within each sequence.

    q: [t, kv, group, d]; k, v: [t, kv, d]. Padding tokens carry row -1, so no real token
    ever attends to them. first_keys [t]: each token's first visible key position (None:
    no window)."""
    same_seq = token_rows[:, None] == token_rows[None, :]
    causal = positions[None, :] <= positions[:, None]
    if first_keys is not None:
        causal &= positions[None, :] >= first_keys[:, None]
    mask = (same_seq & causal)[:, None, None, :]
    scores = jnp.einsum("tkgd,skd->tkgs", q, k)
    return partial_softmax(scores, mask, lambda p: jnp.einsum("tkgs,skd->tkgd", p, v), softcap)


def empty_state(num_tokens: int, num_kv: int, group: int, head_dim: int, dtype):
    """The softmax state of no keys at all."""
    return (
        jnp.full((num_tokens, num_kv, group), NEG_INF, dtype),
        jnp.zeros((num_tokens, num_kv, group), dtype),
        jnp.zeros((num_tokens, num_kv, group, head_dim), dtype),
    )


def block_reader(k_cache, v_cache, layer, tables, context_lens, first_keys, attend):
    """A fori_loop body over blocks of pages, and the loop's first and last block.

    tables [n, pages_per_seq] are the page lists read (one per token, or per dense row);
    `attend(j, k, v, key_positions)` folds one block's keys [n, block_keys, kv, d] into the
    state. Blocks before the first key any token with a context sees (`first_keys` [t]) are
    skipped."""
    page_size = k_cache.shape[2]
    block_pages = max(1, BLOCK_TOKENS // page_size)
    block_keys = block_pages * page_size
    tables = jnp.pad(tables, ((0, 0), (0, -tables.shape[1] % block_pages)))  # the null page
    num_tables = tables.shape[0]

    def read_block(j, state):
        pages = jax.lax.dynamic_slice_in_dim(tables, j * block_pages, block_pages, axis=1)
        k = readable(k_cache[layer, pages].reshape(num_tables, block_keys, *k_cache.shape[3:]))
        v = readable(v_cache[layer, pages].reshape(num_tables, block_keys, *v_cache.shape[3:]))
        return merge_softmax(state, attend(k, v, j * block_keys + jnp.arange(block_keys)))

    num_blocks = (context_lens.max() + block_keys - 1) // block_keys
    if first_keys is None:
        return read_block, 0, num_blocks
    seen_from = jnp.min(jnp.where(context_lens > 0, first_keys, jnp.iinfo(jnp.int32).max))
    first_block = jnp.minimum(jnp.maximum(seen_from, 0) // block_keys, num_blocks)
    return read_block, first_block, num_blocks


def visible(key_positions, context_lens, first_keys):
    """Mask [t, keys] of the cached keys each token sees: below its context, and from its
    first key on where there is a window (`first_keys` not None)."""
    mask = key_positions[None, :] < context_lens[:, None]
    if first_keys is not None:
        mask &= key_positions[None, :] >= first_keys[:, None]
    return mask


def attend_to_cache(q, k_cache, v_cache, layer, block_tables, token_rows, context_lens, first_keys, softcap=None):
    """Attention to each token's cached context, read token by token, a block of pages per
    loop iteration (the decode path: a decode row's one token reads its row's pages once).

    k_cache, v_cache: [layers, pages, page_size, kv, d], read at `layer` without slicing.
    Blocks of about BLOCK_TOKENS keys rather than single pages: each iteration costs a
    gather and a handful of small ops, and XLA's CPU backend pays per op, so a decode step
    at a context of 200 ran 13 iterations of 16 keys per layer where it now runs two."""
    token_tables = block_tables[jnp.maximum(token_rows, 0)]  # [t, pages_per_seq]; padding reads row 0

    def attend(k, v, key_positions):
        # Products and sums rather than einsums: a dot batched over (token, kv head) wants
        # the gathered keys [t, p, kv, d] transposed to [t, kv, p, d] first, and on XLA's
        # CPU backend those transposes cost more than the gather (43 of 127 ms in a 32-row
        # decode step). Broadcast-multiply-reduce reads them as they lie.
        mask = visible(key_positions, context_lens, first_keys)
        scores = (q[:, None] * k[:, :, :, None, :]).sum(-1)  # [t, p, kv, g]
        scores = jnp.moveaxis(scores, 1, -1)  # [t, kv, g, p]: small, unlike the keys
        return partial_softmax(scores, mask[:, None, None, :],
                               lambda p: (jnp.moveaxis(p, -1, 1)[..., None] * v[:, :, :, None, :]).sum(1), softcap)

    read_block, first, last = block_reader(k_cache, v_cache, layer, token_tables, context_lens, first_keys, attend)
    return jax.lax.fori_loop(first, last, read_block, empty_state(*q.shape, q.dtype))


def attend_to_dense_row(q, k_cache, v_cache, layer, table, in_row, context_lens, first_keys, softcap=None):
    """Attention of the tokens `in_row` (a mask [t]) to their row's cached context, read once:
    the row's pages `table` [pages_per_seq] are gathered a block at a time and every token
    of the step is scored against them, the others masked out. A prompt chunk of 488 tokens
    over 512 cached ones gathers 512 keys instead of 488 x 512."""
    context_lens = jnp.where(in_row, context_lens, 0)

    def attend(k, v, key_positions):
        mask = in_row[:, None] & visible(key_positions, context_lens, first_keys)
        scores = jnp.einsum("tkgd,pkd->tkgp", q, k[0])
        return partial_softmax(scores, mask[:, None, None, :], lambda p: jnp.einsum("tkgp,pkd->tkgd", p, v[0]),
                               softcap)

    read_block, first, last = block_reader(k_cache, v_cache, layer, table[None, :], context_lens, first_keys, attend)
    return jax.lax.fori_loop(first, last, read_block, empty_state(*q.shape, q.dtype))


def attend_to_context(q, k_cache, v_cache, layer, batch, first_keys, softcap=None, read_cached=attend_to_cache):
    """Every token's attention to its cached context.

    A step of more tokens than rows (some row computes a chunk of several) splits the work:
    the first `rows` tokens, where the runner puts every single-token row, read token by
    token; each of the batch's `dense_rows` (its multi-token rows, engine/device/batch.py) reads
    its pages once for all of its tokens. `read_cached` reads the single-token rows: the
    native CPU kernel replaces it (engine/device/attention/native_cpu.py)."""
    num_tokens, num_rows = q.shape[0], batch.block_tables.shape[0]
    if num_tokens <= num_rows:
        return read_cached(q, k_cache, v_cache, layer, batch.block_tables, batch.token_rows, batch.context_lens,
                               first_keys, softcap)
    dense = (batch.token_rows[:, None] == batch.dense_rows[None, :]) & (batch.dense_rows[None, :] >= 0)
    sparse_lens = jnp.where(dense.any(-1), 0, batch.context_lens)[:num_rows]
    sparse = read_cached(q[:num_rows], k_cache, v_cache, layer, batch.block_tables,
                             batch.token_rows[:num_rows], sparse_lens,
                             None if first_keys is None else first_keys[:num_rows], softcap)
    padding = empty_state(num_tokens - num_rows, *q.shape[1:], q.dtype)
    state = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), sparse, padding)
    for index in range(batch.dense_rows.shape[0]):
        table = batch.block_tables[jnp.maximum(batch.dense_rows[index], 0)]
        state = merge_softmax(state, attend_to_dense_row(q, k_cache, v_cache, layer, table, dense[:, index],
                                                         batch.context_lens, first_keys, softcap))
    return state


def paged_attention(q, k, v, k_cache, v_cache, layer, batch, scale: float, window=None, softcap=None,
                    read_cached=attend_to_cache, read_step=attend_to_step):
    """Attention output [t, heads, d] for queries q [t, heads, d] and this step's k, v [t, kv, d].

    `window` (None: every key) may be traced, as a scan over layers gives it; `softcap` is
    static (None: off); `read_cached` as in `attend_to_context`; `read_step` the attention
    among the step's own tokens (`attend_to_step`'s signature: the native CPU kernel
    replaces it too)."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv = k.shape[1]
    q = (q * scale).reshape(num_tokens, num_kv, num_heads // num_kv, head_dim)
    first_keys = None if window is None else batch.positions - window + 1
    cached = attend_to_context(q, k_cache, v_cache, layer, batch, first_keys, softcap, read_cached)
    fresh = read_step(q, k, v, batch.positions, batch.token_rows, first_keys, softcap)
    _, normaliser, weighted = merge_softmax(cached, fresh)
    return (weighted / normaliser[..., None]).reshape(num_tokens, num_heads, head_dim)
