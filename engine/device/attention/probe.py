"""A start-up check of the attention kernel on the machine that will serve with it.

`auto` picks the Mosaic GPU kernel on GPUs, but a kernel can fail where the reference runs:
a driver, ptxas or jax version that rejects it, or one that computes wrong numbers. Before
the engine commits to it, the kernel runs a step of the engine's smallest bucket and one of
its largest, at the model's head shape, and must agree with the reference; otherwise `auto`
serves with the reference and logs why, and an explicit `mosaic_gpu` refuses to start.

The rows' contexts span three key blocks of the kernel (engine/device/attention/mosaic_gpu.py), so
that both buffer slots are used and the second use of a slot flips its barrier's phase."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.attention.splits import key_block
from engine.device.batch import empty_batch

TOLERANCE = 2e-2  # relative L2 error; bfloat16's rounding of P alone gives about 3e-3
# (tokens, rows) of the buckets probed when the engine names none: a 1-token one and a mixed one.
DEFAULT_BUCKETS = ((1, 1), (32, 3))


def probe_rows(page_size: int, num_tokens: int) -> tuple[tuple[int, int], ...]:
    """(cached tokens, tokens this step) of the probe's rows in a bucket of `num_tokens`:
    decodes over a context of three key blocks and over an empty one, then (where the bucket
    holds it) a prompt chunk that crosses a block's edge; single-token rows first, as the
    runner lays them out."""
    block = key_block(page_size)
    if num_tokens < 3:
        return ((2 * block + 5, 1),)
    chunk = min(num_tokens - 2, 19)
    return (2 * block + 5, 1), (0, 1), (block - chunk // 2, chunk)


def probe_step(num_heads: int, num_kv: int, head_dim: int, page_size: int, dtype, num_tokens: int, num_rows: int):
    """Random queries, a random cache holding every row's keys, and a batch of the bucket
    (`num_tokens`, `num_rows`) that reads them."""
    rows = probe_rows(page_size, num_tokens)[:num_rows]
    rng = np.random.default_rng(num_tokens)
    pages_per_seq = max(-(-(cached + new) // page_size) for cached, new in rows)
    shape = (1, 1 + len(rows) * pages_per_seq, page_size, num_kv, head_dim)
    k_cache, v_cache = (jnp.asarray(rng.standard_normal(shape), dtype) for _ in range(2))
    batch = empty_batch(num_tokens, num_rows, pages_per_seq, vocab_size=8, history=8, max_prefill_rows=1)
    cursor = 0
    for row, (cached, new) in enumerate(rows):
        batch.block_tables[row] = 1 + row * pages_per_seq + np.arange(pages_per_seq)
        span = slice(cursor, cursor + new)
        batch.token_rows[span], batch.positions[span], batch.context_lens[span] = row, cached + np.arange(new), cached
        if new > 1:
            batch.dense_rows[0] = row
        cursor += new
    q = jnp.asarray(rng.standard_normal((num_tokens, num_heads, head_dim)), dtype)
    real = batch.token_rows >= 0
    slots = batch.block_tables[batch.token_rows[real]][np.arange(cursor), batch.positions[real] // page_size]
    step_keys = [jnp.zeros((num_tokens, num_kv, head_dim), dtype).at[:cursor].set(
        cache[0, slots, batch.positions[real] % page_size]) for cache in (k_cache, v_cache)]
    return q, *step_keys, k_cache, v_cache, batch


def kernel_problem(kernel, reference, num_heads: int, num_kv: int, head_dim: int, page_size: int, dtype,
                   buckets: tuple[tuple[int, int], ...] = DEFAULT_BUCKETS) -> str | None:
    """None when `kernel` runs a probe step of every bucket (tokens, rows) and agrees with
    `reference`; else what went wrong, and at which bucket."""
    for num_tokens, num_rows in buckets:
        problem = _bucket_problem(kernel, reference, num_heads, num_kv, head_dim, page_size, dtype, num_tokens,
                                  num_rows)
        if problem is not None:
            return f"{problem} (the {num_tokens}-token bucket)"
    return None


def _bucket_problem(kernel, reference, num_heads, num_kv, head_dim, page_size, dtype, num_tokens, num_rows):
    q, k, v, k_cache, v_cache, batch = probe_step(num_heads, num_kv, head_dim, page_size, dtype, num_tokens,
                                                  num_rows)
    real = np.asarray(batch.token_rows) >= 0
    try:
        got = np.asarray(jax.jit(kernel)(q, k, v, k_cache, v_cache, 0, batch, 0.125), np.float32)[real]
    except Exception as error:  # noqa: BLE001 - any failure of the kernel means: do not use it
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    as_f32 = [a.astype(jnp.float32) for a in (q, k, v, k_cache, v_cache)]
    expected = np.asarray(jax.jit(reference)(*as_f32, 0, batch, 0.125))[real]
    error = float(np.linalg.norm(got - expected) / np.linalg.norm(expected))
    if not np.isfinite(error) or error > TOLERANCE:
        return f"its output differs from the reference by {error:.3g} (relative L2; at most {TOLERANCE} allowed)"
    return None
