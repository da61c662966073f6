"""Attention over a ragged batch and a paged KV cache, in plain jnp.

Each token attends to two sets of keys, merged with the online-softmax rule:
- its sequence's earlier tokens, read page by page from the cache (positions below the
  token's `context_lens`); the loop runs only as many pages as the longest context in the
  batch needs, so a short batch never pays for max_model_len;
- the tokens of its own sequence in this step (causal), taken straight from the fresh
  keys and values, so a prompt's first chunk reads no cache at all.
Masked keys add exact zeros, so a token's result does not depend on what else is batched.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def merge_softmax(a, b):
    """Combine two partial softmax states (running max, normaliser, weighted sum)."""
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = jnp.maximum(m_a, m_b)
    # Both empty (m = -inf): shift by 0 so the scales are exp(-inf) = 0, not NaN.
    shift = jnp.where(jnp.isfinite(m), m, 0.0)
    scale_a, scale_b = jnp.exp(m_a - shift), jnp.exp(m_b - shift)
    return m, l_a * scale_a + l_b * scale_b, acc_a * scale_a[..., None] + acc_b * scale_b[..., None]


def partial_softmax(scores, mask, values_einsum):
    """Softmax state of masked scores [t, kv, group, keys]; values_einsum(p) gives the sum."""
    scores = jnp.where(mask, scores, NEG_INF)
    m = scores.max(-1)
    # A row with no valid key keeps m = -inf; shift by 0 there so exp() gives zeros, not NaN.
    p = jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0)[..., None])
    p = jnp.where(mask, p, 0.0)
    return m, p.sum(-1), values_einsum(p)


def attend_to_step(q, k, v, positions, token_rows):
    """Causal attention among the tokens of this step, within each sequence.

    q: [t, kv, group, d]; k, v: [t, kv, d]. Padding tokens carry row -1, so no real token
    ever attends to them."""
    same_seq = token_rows[:, None] == token_rows[None, :]
    causal = positions[None, :] <= positions[:, None]
    mask = (same_seq & causal)[:, None, None, :]
    scores = jnp.einsum("tkgd,skd->tkgs", q, k)
    return partial_softmax(scores, mask, lambda p: jnp.einsum("tkgs,skd->tkgd", p, v))


def attend_to_cache(q, k_cache, v_cache, layer, block_tables, token_rows, context_lens):
    """Attention to each token's cached context, one page per loop iteration.

    k_cache, v_cache: [layers, pages, page_size, kv, d], read at `layer` without slicing."""
    num_tokens, num_kv, group, head_dim = q.shape
    page_size = k_cache.shape[2]
    token_tables = block_tables[jnp.maximum(token_rows, 0)]  # [t, pages_per_seq]; padding reads row 0
    offsets = jnp.arange(page_size)

    def read_page(j, state):
        pages = token_tables[:, j]
        k = k_cache[layer, pages]  # [t, page_size, kv, d]
        v = v_cache[layer, pages]
        mask = (j * page_size + offsets)[None, :] < context_lens[:, None]
        scores = jnp.einsum("tkgd,tpkd->tkgp", q, k)
        page_state = partial_softmax(scores, mask[:, None, None, :],
                                     lambda p: jnp.einsum("tkgp,tpkd->tkgd", p, v))
        return merge_softmax(state, page_state)

    init = (
        jnp.full((num_tokens, num_kv, group), NEG_INF, q.dtype),
        jnp.zeros((num_tokens, num_kv, group), q.dtype),
        jnp.zeros((num_tokens, num_kv, group, head_dim), q.dtype),
    )
    num_pages = (context_lens.max() + page_size - 1) // page_size
    return jax.lax.fori_loop(0, num_pages, read_page, init)


def paged_attention(q, k, v, k_cache, v_cache, layer, batch, scale: float):
    """Attention output [t, heads, d] for queries q [t, heads, d] and this step's k, v [t, kv, d]."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv = k.shape[1]
    q = (q * scale).reshape(num_tokens, num_kv, num_heads // num_kv, head_dim)
    cached = attend_to_cache(q, k_cache, v_cache, layer, batch.block_tables, batch.token_rows, batch.context_lens)
    fresh = attend_to_step(q, k, v, batch.positions, batch.token_rows)
    _, normaliser, weighted = merge_softmax(cached, fresh)
    return (weighted / normaliser[..., None]).reshape(num_tokens, num_heads, head_dim)
