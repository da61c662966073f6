"""The layers' matmuls alone, read through each form of the layer loop (for tools/gpu_bench.py).

engine/models/llama.py loops over the layers either as a `lax.scan` over the stacked weights or
unrolled with a static slice per layer, and takes the form that measured best on the
backend (`layer_loop_for`). On an H100 XLA copied every layer's weights out of the stack
before a scan's matmuls (issue 24). This times both forms over the engine's own weights,
with attention left out, so that each GPU run records what decides the choice: milliseconds
per pass over every layer at one row and at many, against the time to read the weights once.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from engine.config import SCAN, UNROLLED, ModelConfig
from engine.models.layers import layer_weights, linear

FORMS = (SCAN, UNROLLED)  # engine/models/llama.py's layer loops


def layer_matmuls(config: ModelConfig, layer_loop: str):
    """A jitted pass of x [rows, hidden] through every layer's projections and MLP, with
    residuals and no attention (its output is the queries' part of wqkv)."""
    def layer(x, weights):
        queries = linear(x, weights["wqkv"])[:, : config.q_size]
        x = x + linear(queries, weights["wo"])
        gate, up = jnp.split(linear(x, weights["w_gate_up"]), 2, axis=-1)
        return x + linear(jax.nn.silu(gate) * up, weights["w_down"]), None

    def forward(stacked, x):
        if layer_loop == SCAN:
            return jax.lax.scan(layer, x, stacked)[0]
        for index in range(config.num_layers):
            x, _ = layer(x, layer_weights(stacked, index))
        return x

    return jax.jit(forward)


def matmul_weights(engine) -> dict:
    """The engine's stacked projection and MLP weights, where the runner keeps them."""
    from flax import nnx

    stacked = nnx.merge(engine.runner.graphdef, engine.runner.state).layers.stacked()
    return {name: stacked[name] for name in ("wqkv", "wo", "w_gate_up", "w_down")}


def time_layer_loops(engine, rows: tuple[int, ...], repeats: int) -> dict[str, float]:
    """{"layers_FORM_compile_s", "layers_FORM_ROWS_ms"} for both forms and each row count:
    the compile of the one-row program, and the median of `repeats` timed passes."""
    from bench import timed_calls

    config, weights = engine.model_config, matmul_weights(engine)
    dtype = jax.tree_util.tree_leaves(weights)[0].dtype
    figures = {}
    for layer_loop in FORMS:
        forward = layer_matmuls(config, layer_loop)
        for count in rows:
            x = jnp.ones((count, config.hidden_size), dtype)
            started = time.perf_counter()
            forward(weights, x).block_until_ready()  # the compile, and a first pass
            if count == rows[0]:
                figures[f"layers_{layer_loop}_compile_s"] = time.perf_counter() - started
            seconds = timed_calls(lambda: forward(weights, x).block_until_ready(), repeats)
            figures[f"layers_{layer_loop}_{count}_ms"] = 1e3 * float(np.median(seconds))
    return figures


def weight_bytes(engine) -> int:
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(matmul_weights(engine)))

