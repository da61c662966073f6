"""Random ragged steps over a random paged cache, for comparing attention implementations.

A case is a list of rows, each (cached tokens, tokens this step). The step is laid out as
the runner lays it out (engine/device/runner.py `token_spans`: single-token rows first), its keys
and values already in the cache as the model writes them before attending, and the same
keys passed separately for the jnp reference, which takes them fresh."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.config import EngineConfig
from engine.device.batch import BatchInputs, empty_batch
from engine.device.runner import ModelRunner, RowPlan
from engine.models.params import random_params


@dataclass
class Step:
    q: np.ndarray  # [tokens, heads, d]
    k: np.ndarray  # [tokens, kv, d]: this step's keys, also in the cache
    v: np.ndarray
    k_cache: np.ndarray  # [layers, pages, page_size, kv, d]
    v_cache: np.ndarray
    batch: BatchInputs
    layer: int


def token_order(rows: list[tuple[int, int]]) -> list[int]:
    """Row indices in batch order: single-token rows first, as the runner places them."""
    return sorted(range(len(rows)), key=lambda index: rows[index][1] > 1)


def make_step(rows: list[tuple[int, int]], *, num_heads: int, num_kv: int, head_dim: int, page_size: int,
              num_tokens: int, num_rows: int, dtype, seed: int = 0, num_layers: int = 2,
              max_prefill_rows: int = 4) -> Step:
    """A step of `rows` (cached, new) padded to a bucket of num_tokens tokens and num_rows rows."""
    rng = np.random.default_rng(seed)
    pages_per_seq = max(-(-(cached + new) // page_size) for cached, new in rows) + 1
    num_pages = 1 + len(rows) * pages_per_seq + 3
    shape = (num_layers, num_pages, page_size, num_kv, head_dim)
    k_cache = rng.standard_normal(shape).astype(dtype)
    v_cache = rng.standard_normal(shape).astype(dtype)
    free_pages = list(rng.permutation(np.arange(1, num_pages)))  # scattered, never the null page
    batch = empty_batch(num_tokens, num_rows, pages_per_seq, vocab_size=8, history=8,
                        max_prefill_rows=max_prefill_rows)
    cursor, dense = 0, []
    for index in token_order(rows):
        cached, new = rows[index]
        pages = [free_pages.pop() for _ in range(-(-(cached + new) // page_size))]
        batch.block_tables[index, :len(pages)] = pages
        span = slice(cursor, cursor + new)
        batch.token_rows[span] = index
        batch.positions[span] = np.arange(cached, cached + new)
        batch.context_lens[span] = cached
        if new > 1:
            dense.append(index)
        cursor += new
    batch.dense_rows[:len(dense)] = dense
    layer = num_layers - 1
    real = batch.token_rows[:cursor]
    slots = batch.block_tables[real, batch.positions[:cursor] // page_size] * page_size + batch.positions[:cursor] % page_size
    k = np.zeros((num_tokens, num_kv, head_dim), dtype)
    v = np.zeros_like(k)
    k[:cursor] = k_cache[layer, slots // page_size, slots % page_size]
    v[:cursor] = v_cache[layer, slots // page_size, slots % page_size]
    q = rng.standard_normal((num_tokens, num_heads, head_dim)).astype(dtype)
    return Step(q, k, v, k_cache, v_cache, batch, layer)


def chunked_prompt_logits(model_config, attention: str, params=None, **engine_options):
    """(logits of every token, the runner) of a 30-token random prompt run through a
    ModelRunner on `attention` as a serving engine would: in two prompt chunks, then a
    decode, over pages 1 to 3; `params`, else random weights of seed 3. `engine_options`:
    EngineConfig fields."""
    engine = EngineConfig(max_model_len=48, max_num_seqs=2, max_num_batched_tokens=32, page_size=16, num_pages=8,
                          attention=attention, **engine_options)
    runner = ModelRunner(model_config, engine, random_params(model_config, seed=3) if params is None else params)
    prompt = list(np.random.default_rng(0).integers(0, model_config.vocab_size, 30))
    table = [1, 2, 3]
    chunks = [RowPlan(prompt[:20], 0, table), RowPlan(prompt[20:29], 20, table), RowPlan(prompt[29:], 29, table)]
    return np.concatenate([runner.hidden_logits([chunk]) for chunk in chunks]), runner
