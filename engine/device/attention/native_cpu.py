"""The attention through the native CPU kernel (engine/device/native attention.cc): every
token of the step reads all of its keys from the paged cache, page by page where they lie,
with the online softmax kept per (token, KV head).

The model writes the step's keys and values to the cache before its attention
(engine/models/llama.py `attend`), so a token at position p finds keys 0..p there, at the
cache's precision, whether an earlier step, an earlier chunk of its prompt, the prefix cache
or this step put them there; and they are folded in the same pages from position 0 whatever
else the step holds. A token's attention is then the same bits alone or in a busy batch,
from a cold prompt or from the prefix cache (tests/engine/test_batch_invariance.py). The
reference instead merges the cache's keys with the step's own, kept in float32, which
differ at a prefix-cache hit. Served for plain attention in float32 (`supports`): no
window, no soft-capping, a head_dim of 32, 64, 128 or 256.
"""

from __future__ import annotations

import jax.numpy as jnp

from engine.device.native import ops as native_ops

HEAD_DIMS = (32, 64, 128, 256)  # the kernel's instantiations (attention.cc attend_one_for)
MAX_PAGE_SIZE = 256


def supports(dtype, head_dim: int, page_size: int) -> bool:
    return jnp.dtype(dtype) == jnp.float32 and head_dim in HEAD_DIMS and page_size <= MAX_PAGE_SIZE


def native_cpu_attention(q, k, v, k_cache, v_cache, layer, batch, scale: float, window=None, softcap=None):
    """Attention output [t, heads, d] for queries q [t, heads, d], over the cache that already
    holds this step's keys and values (k, v: unused, there for the common signature)."""
    if window is not None or softcap is not None:
        raise ValueError("the native CPU attention serves no window or soft-capping (choose() gives the reference)")
    num_tokens, num_heads, head_dim = q.shape
    num_kv = k_cache.shape[3]
    q = (q * scale).reshape(num_tokens, num_kv, num_heads // num_kv, head_dim)
    real = batch.token_rows >= 0
    tables = batch.block_tables[jnp.maximum(batch.token_rows, 0)]  # [t, pages]; padding reads row 0
    keys = jnp.where(real, batch.positions + 1, 0)  # itself and every key before it
    _, normaliser, weighted = native_ops.decode_attention(q, k_cache, v_cache, layer, tables, keys)
    # Padding reads no key: its normaliser is 0, and its output zeros rather than NaN.
    out = weighted / jnp.where(normaliser > 0, normaliser, 1.0)[..., None]
    return out.reshape(num_tokens, num_heads, head_dim)
