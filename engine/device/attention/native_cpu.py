"""The reference attention (reference.py) with two parts through the native CPU kernels
(engine/device/native): each single-token row's cached keys and values are read page by
page where they lie, with the online softmax kept per (token, KV head), instead of being
gathered into a copy and reduced by broadcast products; and each token's attention to the
step's own keys reads only its row's, where the reference scores the whole step's and masks
the rest (a prefill bucket of four prompts: sixteen times the scores). Prompt chunks' reads
of their cached context (dense rows) stay in jnp. Served for plain attention in float32 (`supports`): no window,
no soft-capping, a head_dim of 32, 64, 128 or 256.
"""

from __future__ import annotations

import jax.numpy as jnp

from engine.device.attention.reference import paged_attention as reference_attention
from engine.device.native import ops as native_ops


HEAD_DIMS = (32, 64, 128, 256)  # the kernel's instantiations (attention.cc attend_one_for)
MAX_PAGE_SIZE = 256


def supports(dtype, head_dim: int, page_size: int) -> bool:
    return jnp.dtype(dtype) == jnp.float32 and head_dim in HEAD_DIMS and page_size <= MAX_PAGE_SIZE


def plain_only(first_keys, softcap) -> None:
    """The kernels serve plain attention: no window (`first_keys`), no soft-capping."""
    if first_keys is not None or softcap is not None:
        raise ValueError("the native CPU attention serves no window or soft-capping (choose() gives the reference)")


def attend_to_cache(q, k_cache, v_cache, layer, block_tables, token_rows, context_lens, first_keys, softcap=None):
    """reference.attend_to_cache's softmax state, by the kernel (plain attention only)."""
    plain_only(first_keys, softcap)
    tables = block_tables[jnp.maximum(token_rows, 0)]  # padding tokens read row 0, at a context of 0
    return native_ops.decode_attention(q, k_cache, v_cache, layer, tables, context_lens)


def attend_to_step(q, k, v, positions, token_rows, first_keys, softcap=None):
    """reference.attend_to_step's softmax state, by the kernel (plain attention only): each
    token reads only its own row's keys, where the reference scores the whole step's."""
    plain_only(first_keys, softcap)
    return native_ops.step_attention(q, k, v, positions, token_rows)


def native_cpu_attention(q, k, v, k_cache, v_cache, layer, batch, scale: float):
    return reference_attention(q, k, v, k_cache, v_cache, layer, batch, scale, read_cached=attend_to_cache,
                               read_step=attend_to_step)
