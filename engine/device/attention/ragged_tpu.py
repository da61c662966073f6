"""Ragged paged attention on TPUs: JAX's own Pallas TPU kernel behind the engine's signature.

`jax.experimental.pallas.ops.tpu.ragged_paged_attention` serves a mixed step of prompt
chunks and decodes in one call, with sliding windows and soft-capping for the families that
need them. It reads one layer's pages, [pages, page_size, 2 x kv_heads, head_dim], each
head's key and value side by side: the engine keeps its cache that way, one array per
layer, when this kernel serves (engine/device/kv_cache.py `LayerKVCache`), so the kernel reads the
pages the model just wrote, in place.

It wants each sequence's queries as one span, sequences in the order of their spans
(`cu_q_lens`) and the sequences with queries first. The runner lays tokens out row by row,
single-token rows first, so the adapter orders the rows by their first token and leaves the
rows without tokens last.

It runs on TPUs only. jax 0.11.2's TPU interpret mode cannot run it (the kernel reshapes a
VMEM buffer, and interpret mode reads buffers through indexers alone), so on the CPU the
tests check this adapter against JAX's own reference of the kernel's contract
(`ref_ragged_paged_attention`), which it takes in the kernel's place.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as tpu_kernel

from engine.device.attention.work import row_spans

LANES = 128  # a TPU vector register's lanes: head_dim in whole lanes


def supports(dtype, head_dim: int, num_heads: int, num_kv_heads: int, page_size: int) -> bool:
    """Whether the kernel serves this shape: head_dim in whole lanes, and heads the kernel
    can tile (its own rule, `get_min_heads_per_blk`)."""
    del page_size
    if head_dim % LANES or num_heads % num_kv_heads:
        return False
    try:
        tpu_kernel.get_min_heads_per_blk(num_heads, 2 * num_kv_heads, jnp.dtype(dtype), jnp.dtype(dtype))
    except ValueError:
        return False
    return True


def sequences(batch, num_tokens: int):
    """The kernel's view of the batch's rows: (order, kv_lens, cu_q_lens, num_seqs), rows in
    the order of their tokens, the rows without tokens last."""
    num_rows = batch.block_tables.shape[0]
    firsts, counts, first_positions = row_spans(batch.token_rows, batch.positions, num_rows)
    order = jnp.argsort(jnp.where(counts > 0, firsts, num_tokens)).astype(jnp.int32)
    counts, first_positions = counts[order], first_positions[order]
    kv_lens = jnp.where(counts > 0, first_positions + counts, 0).astype(jnp.int32)  # the step's keys are cached
    cu_q_lens = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts).astype(jnp.int32)])
    num_seqs = jnp.sum(counts > 0, keepdims=True).astype(jnp.int32)
    return order, kv_lens, cu_q_lens, num_seqs


def ragged_tpu_attention(q, k, v, k_cache, v_cache, layer, batch, scale, *,
                         kernel=tpu_kernel.ragged_paged_attention):
    """The engine's attention signature over a LayerKVCache layer: `k_cache` is that layer's
    interleaved pages (its keys and values, this step's included), `v_cache` and `layer`
    are unused. `kernel`: JAX's kernel, or a function of the same contract (tests)."""
    del k, v, v_cache, layer
    order, kv_lens, cu_q_lens, num_seqs = sequences(batch, q.shape[0])
    out = kernel(q.astype(k_cache.dtype), k_cache, kv_lens, batch.block_tables[order].astype(jnp.int32), cu_q_lens,
                 num_seqs, sm_scale=scale)
    # Padding tokens' rows: zeros rather than whatever the kernel left there.
    return jnp.where((batch.token_rows >= 0)[:, None, None], out, 0).astype(q.dtype)
