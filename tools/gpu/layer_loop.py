"""The layers' matmuls alone, read through each form of the layer loop (for tools/gpu/bench.py).

engine/models/llama.py loops over the layers as a `lax.scan` over stacked weights (the CPU's
form), or unrolled over weights stored one array per layer (the GPU's), and takes the form
that measured best on the backend (`layer_loop_for`). On an H100 XLA copied every layer's
weights out of the stack before a scan's matmuls (issue 24), and copied static slices of
the stack too inside the step's loop over decode rounds (2026-11-27). This times the three
forms over the first TIMED_LAYERS of the engine's own weights, each inside a `fori_loop`
of one round as the engine's step runs, with attention left out, so that each GPU run
records what decides the choice: milliseconds per pass at one row and at many, against the
time to read those weights once.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from engine.config import SCAN, UNROLLED, ModelConfig
from engine.models.layers import linear

SLICES, ARRAYS = "slices", "arrays"
FORMS = (SCAN, SLICES, ARRAYS)  # a scan over stacks, static slices of stacks, arrays of their own
ENGINE_FORM = {SCAN: SCAN, UNROLLED: ARRAYS}  # the form each of the engine's layer loops takes
MATMUL_WEIGHTS = ("wqkv", "wo", "w_gate_up", "w_down")
# Layers timed: the stacked forms need a stacked copy of them beside the engine's weights,
# and a quarter of the 8B's (3.5 GB) fits beside its cache where all of it might not.
TIMED_LAYERS = 8


def layer_matmuls(config: ModelConfig, form: str):
    """A jitted pass of x [rows, hidden] through the weights' layers (projections and MLP,
    residuals, no attention: its output is the queries' part of wqkv), inside a fori_loop
    of a traced one round, as the engine's step runs its rounds of decode."""
    def layer(x, weights):
        queries = linear(x, weights["wqkv"])[:, : config.q_size]
        x = x + linear(queries, weights["wo"])
        gate, up = jnp.split(linear(x, weights["w_gate_up"]), 2, axis=-1)
        return x + linear(jax.nn.silu(gate) * up, weights["w_down"]), None

    def layers(weights, x):
        if form == SCAN:
            return jax.lax.scan(layer, x, weights)[0]
        for index in range(len(weights) if form == ARRAYS else TIMED_LAYERS):
            x, _ = layer(x, weights[index] if form == ARRAYS else {k: w[index] for k, w in weights.items()})
        return x

    def forward(weights, x, rounds):
        return jax.lax.fori_loop(0, rounds, lambda _, x: layers(weights, x), x)

    return jax.jit(forward)


def per_layer_weights(engine) -> list[dict]:
    """The engine's projection and MLP weights of the first TIMED_LAYERS, a dict per layer
    (sliced out of the stacks where the engine keeps them stacked)."""
    layout, layers = engine.runner.decoder.layout, engine.runner.state["layers"]
    count = min(TIMED_LAYERS, engine.model_config.num_layers)
    if layout.per_layer:
        return [{name: layout.layer(layers, index)[name] for name in MATMUL_WEIGHTS} for index in range(count)]
    stacked = layout.stacked(layers)
    return [{name: stacked[name][index] for name in MATMUL_WEIGHTS} for index in range(count)]


def time_layer_loops(engine, rows: tuple[int, ...], repeats: int) -> dict[str, float]:
    """{"layers_FORM_compile_s", "layers_FORM_ROWS_ms"} for each form and row count: the
    compile of the one-row program, and the median of `repeats` timed passes."""
    from tools.bench.roofline import timed_calls

    config, arrays = engine.model_config, per_layer_weights(engine)
    dtype = arrays[0]["wqkv"].dtype
    figures = {}
    for form in FORMS:
        weights = arrays if form == ARRAYS else {name: jnp.stack([layer[name] for layer in arrays])
                                                 for name in MATMUL_WEIGHTS}
        forward, rounds = layer_matmuls(config, form), np.int32(1)
        for count in rows:
            x = jnp.ones((count, config.hidden_size), dtype)
            started = time.perf_counter()
            forward(weights, x, rounds).block_until_ready()  # the compile, and a first pass
            if count == rows[0]:
                figures[f"layers_{form}_compile_s"] = time.perf_counter() - started
            seconds = timed_calls(lambda: forward(weights, x, rounds).block_until_ready(), repeats)
            figures[f"layers_{form}_{count}_ms"] = 1e3 * float(np.median(seconds))
        del weights
    return figures


def weight_bytes(engine) -> int:
    """The bytes of the timed layers' projection and MLP weights."""
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(per_layer_weights(engine)))
