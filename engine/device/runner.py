"""ModelRunner: packs a step's rows into a bucketed BatchInputs and runs the compiled step.

Every token bucket is compiled ahead of time (`warmup`, engine/device/bucket_programs.py), and
a step only ever calls one of those executables: a shape that was not compiled is an error,
not a silent recompile in the middle of serving.

One call can run several decode steps (`num_steps`, a runtime value, so it costs no extra
executable): the compiled step is a loop of forward and sample whose next input is the
token just sampled, kept on the device (engine/device/batch.py `advance_decode`). The engine asks
for it when every row of the step is a plain decode; a one-stream decode then pays the
host's share of a step (scheduling, packing, dispatch, copies, detokenization and the
HTTP stream's wake-up) once per window instead of once per token.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from engine.config import SCAN, UNROLLED, EngineConfig, ModelConfig
from engine.device.attention import attention_for, reads_a_cache_per_layer
from engine.device.attention import choose as choose_attention
from engine.device.bucket_programs import BucketPrograms, StepProgram
from engine.device.batch import BatchInputs, advance_decode, empty_batch, pack_embeddings
from engine.device.kv_cache import COPY_BATCH, copy_pages, holds_float8, kv_cache_dtype
from engine.device.lora import empty_slots, native_slots, slot_values, write_slot
from engine.device.native import NATIVE
from engine.device.native import target_names as native_target_names
from engine.device.native import resolve as resolve_cpu_kernels
from engine.device.sharding import make_mesh, replicated, served_shardings
from engine.device.step_io import (  # noqa: F401 (RowPlan: the runner's API)
    InFlight, RowNeeds, RowPlan, StepOutput, host_copy, row_needs, token_spans)
from engine.device.residency import Residency
from engine.device.weight_update import WeightRelayout
from engine.device.weights import resolve_dtype, serving_weights
from engine.loader.lora import LoraAdapter
from engine.models import family_of
from engine.models.layers import layer_key, layer_loop_for, live_sequences, live_tokens
from engine.loader.progress import Progress
from engine.sampling.inputs import fill_row
from engine.sampling.logprobs import PromptLogprobs, empty_prompt_logprobs, prompt_logprobs
from engine.sampling.sampler import NUM_TOP_LOGPROBS, SampleResult, result_shape, sample


class ModelRunner(Residency):
    """Owns the device state (weights, KV cache) and the compiled step of each bucket."""

    def __init__(self, model_config: ModelConfig, engine_config: EngineConfig, params: dict | None, mesh=None,
                 served: dict | None = None):
        """The runner of checkpoint `params`, or of weights already in their served form
        (`served`: `serving_weights`' result, as engine/loader/served_cache.py keeps it)."""
        self.model_config = model_config
        engine_config = dataclasses.replace(engine_config, dtype=resolve_dtype(engine_config.dtype))
        self.config = engine_config
        self.mesh = mesh if mesh is not None else make_mesh(engine_config)
        # Weights restored straight onto the mesh (Orbax) stay there; host arrays are placed.
        weights = served if served is not None else serving_weights(model_config, params, engine_config.dtype,
                                                                    engine_config.quantization)
        shape = (engine_config.dtype, model_config.head_dim, model_config.num_heads, model_config.num_kv_heads,
                 engine_config.page_size)
        # The kernel's start-up check runs a step of the smallest and of the largest bucket.
        buckets = tuple((tokens, engine_config.seq_bucket(tokens))
                        for tokens in (engine_config.token_buckets[0], engine_config.token_buckets[-1]))
        plain = not (model_config.windowed(engine_config.max_model_len) or model_config.attn_logit_softcapping)
        # The native CPU kernels (engine/device/native): NATIVE or JNP.
        self.cpu_kernels = resolve_cpu_kernels(engine_config.cpu_kernels, jax.default_backend(), self.mesh.size)
        self.kv_cache_dtype = kv_cache_dtype(engine_config, self.cpu_kernels == NATIVE)
        self.attention_choice = choose_attention(engine_config.attention, *shape, buckets=buckets, plain=plain,
                                                 native=self.cpu_kernels == NATIVE,
                                                 float8_cache=holds_float8(self.kv_cache_dtype))
        self.attention = self.attention_choice.in_use
        attention = attention_for(self.attention, self.mesh, model_config.num_kv_heads)
        per_layer = reads_a_cache_per_layer(self.attention)  # the TPU kernel's cache layout
        self.layer_loop = layer_loop_for(engine_config.layer_loop, jax.default_backend(), per_layer)
        native_linear = self.cpu_kernels == NATIVE and self.layer_loop == SCAN
        # Adapter slots in the native kernels' layout where their products go through them.
        self.native_slots = native_slots(model_config, engine_config, native_linear, weights["layers"])
        weights["layers"].update(empty_slots(model_config, engine_config, engine_config.dtype, self.native_slots))
        weights = jax.device_put(weights, served_shardings(self.mesh, weights))
        decoder = family_of(model_config).decoder(model_config, weights, attention, self.layer_loop,
                                                  lora_slots=engine_config.max_loras,
                                                  native_linear=native_linear,
                                                  lora_rank=engine_config.max_lora_rank, native_lora=self.native_slots)
        self.decoder, self.state = decoder.split()  # the code, and the arrays a step takes
        self.per_layer_cache = per_layer
        self.kv_cache = self.new_kv_cache()
        self._abstract_kv_cache = abstract(self.kv_cache)
        # What a bucket compiles against: the weights' shapes, not the arrays, which an adapter
        # slot's write replaces on the engine thread while a background compile lowers.
        self._abstract_state = abstract(self.state)
        self._step = jax.jit(self._forward_and_sample, donate_argnums=(1,),
                             compiler_options=engine_config.compiler_options)
        self.programs = BucketPrograms(engine_config.token_buckets, self._step_program())
        self._all_logits = jax.jit(self._logits_of_every_token, donate_argnums=(1,),
                                   compiler_options=engine_config.compiler_options)
        self._copy_pages = jax.jit(copy_pages, donate_argnums=(0,))
        # Not donated: a step already dispatched may still read the slot's old weights.
        self._write_slot = jax.jit(write_slot, static_argnums=(3, 4))
        # On a multi-host leader: publishes each device operation for the followers to
        # replay (engine/device/multihost.py), before it starts here.
        self.publish: Callable[[tuple], None] | None = None
        # New weights into this state, with no new step program (engine/device/weight_update.py).
        self.relayout = WeightRelayout(self)

    def _forward_and_sample(self, state, kv_cache, batch: BatchInputs, num_steps):
        """`num_steps` (>= 1) rounds of forward and sample, each fed the tokens of the last.

        Returns each round's SampleResult stacked on a leading [max_decode_steps] axis (rounds
        past `num_steps` are zeros), the first round's prompt logprobs, the inputs of the round
        after the last (for `dispatch_next`), and the cache."""
        model = self.decoder.bound(state)
        num_top = min(NUM_TOP_LOGPROBS, self.model_config.vocab_size)

        def round_(index, carry):
            kv_cache, batch, results, prompt = carry
            hidden, kv_cache, routing = model.hidden_states(kv_cache, batch)
            logits = model.logits(hidden[batch.logits_indices], live_sequences(batch.token_rows))
            with jax.named_scope("sampling"):  # named for profiles (tools/gpu/bench.py)
                result = with_routing(sample(logits, batch.sampling), routing, batch.logits_indices)
            # Logits of every token only when some row asked for prompt logprobs (never
            # after the first round: advance_decode clears next_token_ids).
            wanted = batch.next_token_ids >= 0
            prompt = jax.lax.cond(
                jnp.any(wanted),
                lambda: dataclasses.replace(
                    prompt_logprobs(model.logits(hidden, live_tokens(batch.token_rows)),
                                    jnp.maximum(batch.next_token_ids, 0), num_top),
                    routing=routing),
                lambda: prompt)
            results = jax.tree_util.tree_map(lambda stacked, one: stacked.at[index].set(one), results, result)
            return kv_cache, advance_decode(batch, result.tokens, result.mirostat_mu), results, prompt

        routing_shape = batch.forced_experts.shape
        no_routing = jnp.zeros(routing_shape, jnp.int32) if routing_shape[1] else None
        one = jax.eval_shape(lambda result: with_routing(result, no_routing, batch.logits_indices),
                             result_shape(batch.sampling, self.model_config.vocab_size))
        results = jax.tree_util.tree_map(lambda a: jnp.zeros((self.config.max_decode_steps, *a.shape), a.dtype), one)
        prompt = dataclasses.replace(empty_prompt_logprobs(batch.num_tokens, num_top), routing=no_routing)
        kv_cache, batch, results, prompt = jax.lax.fori_loop(0, num_steps, round_, (kv_cache, batch, results, prompt))
        return (results, prompt, batch), kv_cache

    def warmup(self, report: Callable[[str], None] | None = None, buckets: tuple[int, ...] | None = None,
               progress: Progress | None = None, threads: int = 1) -> float:
        """Compile `buckets` (default: every token bucket) now, `threads` at a time
        (engine/device/bucket_programs.py); returns the seconds it took."""
        if self.config.max_loras and not self.programs.compiled:
            self._write_adapter(0, None)  # compiles the slot writes now, not at the first adapter's request
        return self.programs.warmup(report, buckets, progress, threads)

    def essential_buckets(self) -> tuple[int, ...]:
        return self.programs.essential()

    def remaining_buckets(self) -> tuple[int, ...]:
        return self.programs.remaining()

    def bucket_for(self, num_tokens: int) -> int:
        return self.programs.bucket_for(num_tokens)

    def _step_program(self) -> StepProgram:
        """What BucketPrograms compiles: this runner's step over a bucket's shapes."""
        sharding = replicated(self.mesh)

        def abstract_args(bucket: int) -> tuple:
            shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                                            self._empty_batch(bucket))
            return (self._abstract_state, self._abstract_kv_cache, shapes,
                    jax.ShapeDtypeStruct((), jnp.int32, sharding=sharding))

        def after_compile(bucket: int) -> None:
            # Host arrays onto a multi-process mesh pass a small program per shape, whose
            # collectives every process must run in the same order: so a group compiles
            # its buckets at start-up only, never beside a step (api/server/lifecycle.py).
            jax.device_put(self._empty_batch(bucket), sharding)

        return StepProgram(
            step=self._forward_and_sample, jitted=self._step, abstract_args=abstract_args,
            # What the traced step depends on beyond its arguments' shapes and the engine's source.
            key_parts=(self.model_config, self.config, self.attention, self.layer_loop, self.cpu_kernels,
                       str(self.kv_cache_dtype)),
            custom_calls=native_target_names() if self.cpu_kernels == NATIVE else (),
            compiler_options=self.config.compiler_options,
            exportable=self.mesh.size == 1 and jax.process_count() == 1,
            after_compile=after_compile if jax.process_count() > 1 else None)

    def _empty_batch(self, bucket: int) -> BatchInputs:
        return empty_batch(bucket, self.config.seq_bucket(bucket), self.config.max_pages_per_seq,
                           self.model_config.vocab_size, self.config.max_model_len, self.config.max_prefill_rows,
                           self.model_config.hidden_size, min(self.config.max_embedding_rows, bucket),
                           self.model_config.routing_shape)

    def execute(self, rows: list[RowPlan], num_steps: int = 1) -> list[StepOutput]:
        """Run `num_steps` steps (more than one only for rows that all decode one token, with
        pages for `num_steps` tokens): each step's sampled tokens (-1 where none), logprobs
        and state."""
        return self.collect(self.dispatch(rows, num_steps))

    def dispatch(self, rows: list[RowPlan], num_steps: int = 1) -> InFlight:
        """Start `num_steps` steps of `rows` on the device and return without waiting."""
        self._check_steps(num_steps)
        batch = self.pack(rows)
        self._publish(("dispatch", batch, num_steps))
        return self.launch(batch, num_steps, rows)

    def launch(self, batch: BatchInputs, num_steps: int, rows: list[RowPlan] | None = None) -> InFlight:
        """Start the steps of a packed batch (what `dispatch` does after packing; a multi-host
        follower starts the leader's batches so)."""
        compiled = self.programs.compiled.get(batch.num_tokens)
        if compiled is None:
            raise RuntimeError(f"bucket {batch.num_tokens} was not compiled: call warmup() first")
        device_batch = jax.device_put(batch, replicated(self.mesh))
        return self._launch(compiled, rows or [], batch, device_batch, num_steps)

    def dispatch_next(self, flight: InFlight, block_tables: list[list[int]], num_steps: int) -> InFlight:
        """Start the decode window that follows `flight`, before its results are back: the
        same rows, fed on the device by the tokens `flight` samples, with their block tables
        now (which may have grown pages for the new window)."""
        self._check_steps(num_steps)
        tables = padded_tables(block_tables, flight.batch.block_tables.shape)
        self._publish(("dispatch_next", tables, num_steps))
        return self.launch_next(flight, tables, num_steps, flight.rows)

    def launch_next(self, flight: InFlight, tables: np.ndarray, num_steps: int,
                    rows: list[RowPlan] | None = None) -> InFlight:
        device_batch = dataclasses.replace(flight.next_batch, block_tables=jax.device_put(tables, replicated(self.mesh)))
        return self._launch(self.programs.compiled[flight.batch.num_tokens], rows or [], flight.batch, device_batch,
                            num_steps, flight.needs if rows is flight.rows else None)

    def _publish(self, operation: tuple) -> None:
        if self.publish is not None:
            self.publish(operation)

    def _check_steps(self, num_steps: int) -> None:
        if not 1 <= num_steps <= self.config.max_decode_steps:
            raise ValueError(f"num_steps must lie in [1, {self.config.max_decode_steps}]")

    def _launch(self, compiled, rows, batch, device_batch, num_steps, needs: RowNeeds | None = None) -> InFlight:
        (results, prompt, next_batch), self.kv_cache = compiled(self.state, self.kv_cache, device_batch,
                                                                np.int32(num_steps))
        return InFlight(rows, batch, num_steps, results, prompt, next_batch, needs or row_needs(rows))

    def collect(self, flight: InFlight) -> list[StepOutput]:
        """Wait for `flight` and copy its results back. Logprobs (with the sampled tokens' raw
        logits) come back only when a row asked for either."""
        rows, num_steps, results = flight.rows, flight.num_steps, flight.results
        needs = flight.needs or row_needs(rows)
        wanted = (results.tokens, results.mirostat_mu, results.logprobs if needs.logprobs else None,
                  results.beams if needs.beams else None)
        # Sliced on the host: slicing device arrays would compile a program per shape.
        tokens, mirostat_mu, logprobs, beams = jax.tree_util.tree_map(
            lambda a: np.asarray(a)[:num_steps, : len(rows)], host_copy(wanted))
        sampled = needs.sampled
        prompt_rows = self._prompt_rows(rows, flight.batch, flight.prompt)
        return [StepOutput(tokens=np.where(sampled, tokens[step], -1),
                           logprobs=None if logprobs is None else jax.tree_util.tree_map(lambda a: a[step], logprobs),
                           mirostat_mu=mirostat_mu[step],
                           prompt_logprobs=prompt_rows if step == 0 else [None] * len(rows),
                           beams=None if beams is None else jax.tree_util.tree_map(lambda a: a[step], beams))
                for step in range(num_steps)]

    def load_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        """Write `adapter` into LoRA slot `slot` (None: clear it), in dispatch order: steps
        dispatched before read the slot as it was (the weights are replaced, not written)."""
        self._publish(("load_adapter", slot, adapter))
        self._write_adapter(slot, adapter)

    def _write_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        values = slot_values(adapter, self.model_config, self.config)
        layers = self.state["layers"]
        per_layer = self.layer_loop == UNROLLED  # the layers stored one array per layer (Layers)
        for name, value in values.items():
            targets = ([(layer_key(name, index), value[index]) for index in range(self.model_config.num_layers)]
                       if per_layer else [(name, value)])
            for key, part in targets:
                layers[key] = self._write_slot(layers[key], np.int32(slot), part, self.config.max_loras,
                                               self.native_slots)

    def copy_pages(self, pairs: list[tuple[int, int]]) -> None:
        """Copy KV pages (source, destination) on the device, in dispatch order: after every
        step dispatched so far, before any dispatched later (beams forking a shared page).
        COPY_BATCH pairs a call, padded with the null page onto itself: one executable."""
        if pairs:
            self._publish(("copy_pages", pairs))
        for start in range(0, len(pairs), COPY_BATCH):
            chunk = pairs[start: start + COPY_BATCH]
            padded = np.zeros((COPY_BATCH, 2), np.int32)
            padded[: len(chunk)] = chunk
            self.kv_cache = self._copy_pages(self.kv_cache, padded[:, 0], padded[:, 1])

    @staticmethod
    def _prompt_rows(rows: list[RowPlan], batch: BatchInputs, prompt) -> list[PromptLogprobs | None]:
        """Each row's slice of the prompt logprobs (None for rows that did not ask)."""
        if not (batch.next_token_ids >= 0).any():
            return [None] * len(rows)
        prompt = host_copy(prompt)
        return [jax.tree_util.tree_map(lambda a: np.asarray(a)[span], prompt) if row.next_token_ids is not None
                else None for row, span in zip(rows, token_spans(rows))]

    def pack(self, rows: list[RowPlan]) -> BatchInputs:
        """Host arrays for `rows`, padded up to the smallest bucket that holds them.

        Tokens go in the order of `token_spans`; in a bucket of more tokens than rows, the
        multi-token rows are the batch's dense rows (engine/device/attention/reference.py)."""
        num_tokens = sum(len(row.token_ids) for row in rows)
        bucket = self.bucket_for(num_tokens)
        if len(rows) > self.config.seq_bucket(bucket):
            raise ValueError(f"{len(rows)} sequences exceed the {bucket}-token bucket's rows")
        batch = self._empty_batch(bucket)
        if bucket > self.config.seq_bucket(bucket):
            multi = [index for index, row in enumerate(rows) if len(row.token_ids) > 1]
            if len(multi) > self.config.max_prefill_rows:
                raise ValueError(f"{len(multi)} rows of several tokens exceed max_prefill_rows "
                                 f"{self.config.max_prefill_rows}")
            batch.dense_rows[: len(multi)] = multi
        for index, (row, span) in enumerate(zip(rows, token_spans(rows))):
            self._pack_row(batch, index, row, span.start)
        return batch

    def _pack_row(self, batch: BatchInputs, index: int, row: RowPlan, cursor: int) -> None:
        span = slice(cursor, cursor + len(row.token_ids))
        positions = row.start + np.arange(len(row.token_ids), dtype=np.int32)
        table = np.asarray(row.block_table, dtype=np.int32)
        batch.token_ids[span] = row.token_ids
        batch.positions[span] = positions
        batch.token_rows[span] = index
        batch.context_lens[span] = row.start
        if row.next_token_ids is not None:
            batch.next_token_ids[span] = row.next_token_ids
        batch.block_tables[index, : len(table)] = table
        batch.logits_indices[index] = span.stop - 1
        if row.sampling is not None:
            position = row.start + len(row.token_ids)  # of the token being sampled
            fill_row(batch.sampling, index, row.sampling, position, self.model_config.vocab_size)
        if row.embeddings:
            pack_embeddings(batch, row.embeddings, cursor - row.start)
        if row.forced_experts is not None:
            batch.forced_experts[span] = row.forced_experts.reshape(batch.forced_experts[span].shape)
        batch.row_adapters[index] = row.adapter_slot

    def hidden_logits(self, rows: list[RowPlan]) -> np.ndarray:
        """Logits [tokens, vocab] of every real token of `rows`, writing their KV to the cache.

        For tests and prompt scoring: it runs through plain jit, outside the warmed-up buckets."""
        batch = self.pack(rows)
        device_batch = jax.device_put(batch, replicated(self.mesh))
        logits, self.kv_cache = self._all_logits(self.state, self.kv_cache, device_batch)
        logits = np.asarray(logits, dtype=np.float32)
        return np.concatenate([logits[span] for span in token_spans(rows)])

    def _logits_of_every_token(self, state, kv_cache, batch: BatchInputs):
        model = self.decoder.bound(state)
        hidden, kv_cache, _ = model.hidden_states(kv_cache, batch)
        return model.logits(hidden), kv_cache


def padded_tables(block_tables: list[list[int]], shape: tuple[int, int]) -> np.ndarray:
    """The rows' block tables in one array of `shape`, 0 (the null page) past each one's end:
    filled in one masked assignment, not a row at a time (the host's cost a window)."""
    lengths = np.fromiter(map(len, block_tables), np.int64, len(block_tables))
    tables = np.zeros(shape, np.int32)
    tables[: len(block_tables)][np.arange(shape[1]) < lengths[:, None]] = np.fromiter(
        itertools.chain.from_iterable(block_tables), np.int32, int(lengths.sum()))
    return tables


def abstract(tree):
    """`tree` with each array replaced by its shape, dtype and sharding."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), tree)


def with_routing(result: SampleResult, routing, logits_indices) -> SampleResult:
    """`result` with each row's routing: the experts of the forward whose logits it
    sampled from (the routing of its last token); unchanged without experts."""
    if routing is None:
        return result
    return dataclasses.replace(result, logprobs=dataclasses.replace(result.logprobs, routing=routing[logits_indices]))
