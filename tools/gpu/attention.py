"""The attention kernel's decode time alone, against the bytes it must read (for tools/gpu/bench.py).

A decode step of `rows` sequences at `context` cached tokens reads each sequence's keys and
values once: rows x context x kv_heads x head_dim x 2 (keys, values) x the cache's bytes per
value, per layer. This times one layer's call of the Mosaic GPU kernel (engine/device/attention/
mosaic_gpu.py) on such a step over a random cache, and reports milliseconds and the bytes
per second it achieved, to read against the copy bandwidth of the same run. On the CPU
(gpu_bench --smoke) the kernel runs in GPU interpret mode on tiny shapes: it checks the
plumbing, not the speed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.attention import interpret_params
from engine.device.attention.mosaic_gpu import ragged_paged_attention


def decode_case(rows: int, context: int, num_heads: int, num_kv: int, head_dim: int, page_size: int, dtype):
    """(queries, key cache, value cache, token rows, positions, block tables) of a decode step:
    `rows` sequences of `context` cached tokens each, one new token each (already cached)."""
    pages_per_seq = -(-(context + 1) // page_size)
    key = jax.random.key(0)
    shape = (1, 1 + rows * pages_per_seq, page_size, num_kv, head_dim)
    k_cache = jax.random.normal(key, shape, dtype)
    v_cache = jax.random.normal(jax.random.fold_in(key, 1), shape, dtype)
    q = jax.random.normal(jax.random.fold_in(key, 2), (rows, num_heads, head_dim), dtype)
    tables = 1 + jnp.arange(rows * pages_per_seq, dtype=jnp.int32).reshape(rows, pages_per_seq)
    token_rows = jnp.arange(rows, dtype=jnp.int32)
    positions = jnp.full((rows,), context, jnp.int32)
    return q, k_cache, v_cache, token_rows, positions, tables


def time_decode_attention(rows: int, context: int, num_heads: int, num_kv: int, head_dim: int, page_size: int,
                          dtype, repeats: int, on_gpu: bool) -> tuple[float, float]:
    """(milliseconds of one call, GB/s of keys and values read) for one layer's decode step."""
    from tools.bench.roofline import timed_calls

    q, k_cache, v_cache, token_rows, positions, tables = decode_case(rows, context, num_heads, num_kv, head_dim,
                                                                    page_size, dtype)
    interpret = None if on_gpu else interpret_params()
    attend = jax.jit(lambda q, k, v: ragged_paged_attention(q, k, v, 0, token_rows, positions, tables, 0.125,
                                                            interpret=interpret))
    seconds = float(np.median(timed_calls(lambda: attend(q, k_cache, v_cache).block_until_ready(), repeats)))
    read = rows * (context + 1) * num_kv * head_dim * 2 * jnp.dtype(dtype).itemsize
    return 1e3 * seconds, read / seconds / 1e9
