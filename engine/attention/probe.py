"""A start-up check of the attention kernel on the machine that will serve with it.

`auto` picks the Mosaic GPU kernel on GPUs, but a kernel can fail where the reference runs:
a driver, ptxas or jax version that rejects it, or one that computes wrong numbers. Before
the engine commits to it, the kernel runs one small mixed step of the model's head shape
(a prompt chunk over a cached prefix, and two decodes) and must agree with the reference;
otherwise the engine serves with the reference and logs why."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from engine.batch import empty_batch

# Rows of the probe step: (cached tokens, tokens this step).
PROBE_ROWS = ((0, 1), (37, 1), (21, 19))
TOLERANCE = 2e-2  # relative L2 error; bfloat16's rounding of P alone gives about 3e-3


def probe_step(num_heads: int, num_kv: int, head_dim: int, page_size: int, dtype):
    """Random queries, a random cache holding every row's keys, and the batch that reads them."""
    rng = np.random.default_rng(0)
    pages_per_seq = max(-(-(cached + new) // page_size) for cached, new in PROBE_ROWS)
    shape = (1, 1 + len(PROBE_ROWS) * pages_per_seq, page_size, num_kv, head_dim)
    k_cache, v_cache = (jnp.asarray(rng.standard_normal(shape), dtype) for _ in range(2))
    num_tokens = sum(new for _, new in PROBE_ROWS)
    batch = empty_batch(32, len(PROBE_ROWS), pages_per_seq, vocab_size=8, history=8, max_prefill_rows=1)
    cursor = 0
    for row, (cached, new) in enumerate(PROBE_ROWS):  # single-token rows first, as the runner lays them
        batch.block_tables[row] = 1 + row * pages_per_seq + np.arange(pages_per_seq)
        span = slice(cursor, cursor + new)
        batch.token_rows[span], batch.positions[span], batch.context_lens[span] = row, cached + np.arange(new), cached
        cursor += new
    batch.dense_rows[0] = len(PROBE_ROWS) - 1
    q = jnp.asarray(rng.standard_normal((32, num_heads, head_dim)), dtype)
    real = batch.token_rows >= 0
    slots = batch.block_tables[batch.token_rows[real]][np.arange(num_tokens), batch.positions[real] // page_size]
    k = jnp.zeros((32, num_kv, head_dim), dtype).at[:num_tokens].set(k_cache[0, slots, batch.positions[real] % page_size])
    v = jnp.zeros((32, num_kv, head_dim), dtype).at[:num_tokens].set(v_cache[0, slots, batch.positions[real] % page_size])
    return q, k, v, k_cache, v_cache, batch


def kernel_problem(kernel, reference, num_heads: int, num_kv: int, head_dim: int, page_size: int,
                   dtype) -> str | None:
    """None when `kernel` runs the probe step and agrees with `reference`; else what went wrong."""
    q, k, v, k_cache, v_cache, batch = probe_step(num_heads, num_kv, head_dim, page_size, dtype)
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
