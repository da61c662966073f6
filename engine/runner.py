"""ModelRunner: packs a step's rows into a bucketed BatchInputs and runs the compiled step.

Every token bucket is compiled ahead of time at start-up (`warmup`), and a step only ever
calls one of those executables: a shape that was not compiled is an error, not a silent
recompile in the middle of serving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from engine.batch import BatchInputs, empty_batch
from engine.config import EngineConfig, ModelConfig
from engine.kv_cache import init_kv_cache
from engine.model import Llama
from engine.sampling.logprobs import PromptLogprobs, TokenLogprobs, empty_prompt_logprobs, prompt_logprobs
from engine.sampling.sampler import NUM_TOP_LOGPROBS, sample
from engine.sampling.inputs import RowSampling, fill_row
from engine.sharding import make_mesh, replicated, served_shardings
from engine.weights import serving_weights


@dataclass
class RowPlan:
    """One sequence's share of a step: tokens to compute from `start`, and how to sample."""

    token_ids: list[int]
    start: int  # position of token_ids[0] (= tokens of this sequence already in the cache)
    block_table: list[int]
    sampling: RowSampling | None = None  # None: nothing is sampled for this row this step
    next_token_ids: list[int] | None = None  # per token, the prompt token after it (-1: none), for prompt logprobs

    @property
    def sample(self) -> bool:
        return self.sampling is not None


@dataclass
class StepOutput:
    """Host copies of a step's results, one row per RowPlan."""

    tokens: np.ndarray  # [rows] int32, -1 where nothing was sampled
    logprobs: TokenLogprobs  # NumPy arrays [rows, ...]
    mirostat_mu: np.ndarray  # [rows] float32
    prompt_logprobs: list[PromptLogprobs | None]  # per row: NumPy arrays over its tokens


class ModelRunner:
    """Owns the device state (weights, KV cache) and the compiled step of each bucket."""

    def __init__(self, model_config: ModelConfig, engine_config: EngineConfig, params: dict, mesh=None):
        self.model_config = model_config
        self.config = engine_config
        self.mesh = mesh if mesh is not None else make_mesh(engine_config)
        # Weights restored straight onto the mesh (Orbax) stay there; host arrays are placed.
        weights = serving_weights(model_config, params, engine_config.dtype, engine_config.quantization)
        weights = jax.device_put(weights, served_shardings(self.mesh, weights))
        self.graphdef, self.state = nnx.split(Llama(model_config, weights))
        self.kv_cache = init_kv_cache(model_config, engine_config, self.mesh)
        self._step = jax.jit(self._forward_and_sample, donate_argnums=(1,))
        self._compiled: dict[int, Callable] = {}
        self._all_logits = jax.jit(self._logits_of_every_token, donate_argnums=(1,))

    def _forward_and_sample(self, state, kv_cache, batch: BatchInputs):
        model = nnx.merge(self.graphdef, state)
        hidden, kv_cache = model.hidden_states(kv_cache, batch)
        result = sample(model.logits(hidden[batch.logits_indices]), batch.sampling)
        # Logits of every token only when some row asked for prompt logprobs.
        num_top = min(NUM_TOP_LOGPROBS, self.model_config.vocab_size)
        wanted = batch.next_token_ids >= 0
        prompt = jax.lax.cond(
            jnp.any(wanted),
            lambda: prompt_logprobs(model.logits(hidden), jnp.maximum(batch.next_token_ids, 0), num_top),
            lambda: empty_prompt_logprobs(hidden.shape[0], num_top))
        return (result, prompt), kv_cache

    def warmup(self, report: Callable[[str], None] | None = None) -> float:
        """Compile every token bucket now; returns the seconds it took."""
        started = time.perf_counter()
        buckets = self.config.token_buckets
        for index, bucket in enumerate(buckets, 1):
            self._compile(bucket)
            if report:
                report(f"compiled bucket {index}/{len(buckets)}: {bucket} tokens "
                       f"({time.perf_counter() - started:.1f} s)")
        return time.perf_counter() - started

    def _compile(self, bucket: int) -> Callable:
        if bucket not in self._compiled:
            template = self._empty_batch(bucket)
            sharding = replicated(self.mesh)
            shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), template)
            self._compiled[bucket] = self._step.lower(self.state, self.kv_cache, shapes).compile()
        return self._compiled[bucket]

    def _empty_batch(self, bucket: int) -> BatchInputs:
        return empty_batch(bucket, self.config.seq_bucket(bucket), self.config.max_pages_per_seq,
                           self.model_config.vocab_size, self.config.max_model_len)

    def execute(self, rows: list[RowPlan]) -> StepOutput:
        """Run one step: each row's sampled token (-1 where none was sampled), logprobs, state."""
        batch = self.pack(rows)
        compiled = self._compiled.get(batch.num_tokens)
        if compiled is None:
            raise RuntimeError(f"bucket {batch.num_tokens} was not compiled: call warmup() first")
        device_batch = jax.device_put(batch, replicated(self.mesh))
        (result, prompt), self.kv_cache = compiled(self.state, self.kv_cache, device_batch)
        result = jax.tree_util.tree_map(lambda a: np.asarray(a)[: len(rows)], jax.device_get(result))
        tokens = np.where([row.sample for row in rows], result.tokens, -1)
        return StepOutput(tokens=tokens, logprobs=result.logprobs, mirostat_mu=result.mirostat_mu,
                          prompt_logprobs=self._prompt_rows(rows, batch, prompt))

    @staticmethod
    def _prompt_rows(rows: list[RowPlan], batch: BatchInputs, prompt) -> list[PromptLogprobs | None]:
        """Each row's slice of the prompt logprobs (None for rows that did not ask)."""
        if not (batch.next_token_ids >= 0).any():
            return [None] * len(rows)
        prompt = jax.device_get(prompt)
        spans, cursor = [], 0
        for row in rows:
            span = slice(cursor, cursor + len(row.token_ids))
            cursor = span.stop
            wanted = row.next_token_ids is not None
            spans.append(jax.tree_util.tree_map(lambda a: np.asarray(a)[span], prompt) if wanted else None)
        return spans

    def pack(self, rows: list[RowPlan]) -> BatchInputs:
        """Host arrays for `rows`, padded up to the smallest bucket that holds them."""
        num_tokens = sum(len(row.token_ids) for row in rows)
        bucket = self.config.token_bucket(num_tokens)
        if len(rows) > self.config.seq_bucket(bucket):
            raise ValueError(f"{len(rows)} sequences exceed the {bucket}-token bucket's rows")
        batch = self._empty_batch(bucket)
        cursor = 0
        for index, row in enumerate(rows):
            self._pack_row(batch, index, row, cursor)
            cursor += len(row.token_ids)
        return batch

    def _pack_row(self, batch: BatchInputs, index: int, row: RowPlan, cursor: int) -> None:
        page_size = self.config.page_size
        span = slice(cursor, cursor + len(row.token_ids))
        positions = row.start + np.arange(len(row.token_ids), dtype=np.int32)
        table = np.asarray(row.block_table, dtype=np.int32)
        batch.token_ids[span] = row.token_ids
        batch.positions[span] = positions
        batch.token_rows[span] = index
        batch.slot_mapping[span] = table[positions // page_size] * page_size + positions % page_size
        batch.context_lens[span] = row.start
        if row.next_token_ids is not None:
            batch.next_token_ids[span] = row.next_token_ids
        batch.block_tables[index, : len(table)] = table
        batch.logits_indices[index] = span.stop - 1
        if row.sampling is not None:
            position = row.start + len(row.token_ids)  # of the token being sampled
            fill_row(batch.sampling, index, row.sampling, position, self.model_config.vocab_size)

    def hidden_logits(self, rows: list[RowPlan]) -> np.ndarray:
        """Logits [tokens, vocab] of every real token of `rows`, writing their KV to the cache.

        For tests and prompt scoring: it runs through plain jit, outside the warmed-up buckets."""
        batch = self.pack(rows)
        num_real = sum(len(row.token_ids) for row in rows)
        device_batch = jax.device_put(batch, replicated(self.mesh))
        logits, self.kv_cache = self._all_logits(self.state, self.kv_cache, device_batch)
        return np.asarray(logits[:num_real], dtype=np.float32)

    def _logits_of_every_token(self, state, kv_cache, batch: BatchInputs):
        model = nnx.merge(self.graphdef, state)
        hidden, kv_cache = model.hidden_states(kv_cache, batch)
        return model.logits(hidden), kv_cache
