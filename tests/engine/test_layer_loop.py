"""The forward's loop over layers (engine/models/llama.py): a scan on the CPU, unrolled on GPUs.

XLA's GPU backend copied every layer's weights out of the stacked arrays before a scan's
matmuls read them: 55% of an 8B decode step on an H100 (issue 24). Static slices of the
stacks copied too, inside the step's loop over decode rounds (40.6% of the step, measured
2026-11-27). The GPU's form stores each layer's weights as arrays of their own and must read
them where they lie. This is checked on the structure of the program, from any machine: the
decode step that a GPU compiles, lowered here, slices no weight at all, statically or
dynamically. The same check finds the slices in the scan, and static ones wherever they are,
so putting either form back on GPUs fails it.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from native_kernels import require_native_kernels
from numpy_reference import forward

from engine.config import SCAN, UNROLLED, EngineConfig, ModelConfig
from engine.device.runner import ModelRunner, RowPlan
from engine.models.layers import layer_loop_for
from engine.models.params import random_params

# Three layers: no other array of the step has a leading axis of 3.
TINY = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=3,
                   num_heads=4, num_kv_heads=2, head_dim=8)
ENGINE = EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=8, page_size=4, num_pages=40,
                      optimize_compiled_code=False)


def runner_with(layer_loop: str, quantization: str = "none", cpu_kernels: str = "jnp") -> ModelRunner:
    config = EngineConfig(**{**vars(ENGINE), "layer_loop": layer_loop, "quantization": quantization,
                             "cpu_kernels": cpu_kernels})
    return ModelRunner(TINY, config, random_params(TINY, seed=4))


def weight_types(runner: ModelRunner) -> set[str]:
    """The MLIR tensor types (`3x64x32xf32`) of the layers' matrices as the state holds them
    (stacked, or one array per layer)."""
    leaves = jax.tree_util.tree_leaves(runner.state["layers"])
    return {tensor_type(leaf) for leaf in leaves if leaf.ndim >= 2}


def tensor_type(array) -> str:
    return "x".join(map(str, array.shape)) + "x" + {"float32": "f32", "bfloat16": "bf16", "int8": "i8"}[
        np.dtype(array.dtype).name]


def sliced_types(module: str) -> set[str]:
    """The operand types of every static or dynamic slice in a lowered module's text."""
    return set(re.findall(r"stablehlo\.(?:dynamic_)?slice [^\n]*?: \(tensor<([0-9a-z]+)>", module))


def weights_sliced(runner: ModelRunner) -> set[str]:
    """The layers' matrices that the one-token decode step takes a slice of."""
    batch = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), runner._empty_batch(1))
    steps = jax.ShapeDtypeStruct((), np.int32)
    module = runner._step.lower(runner.state, runner._abstract_kv_cache, batch, steps).as_text()
    return sliced_types(module) & weight_types(runner)


def test_gpus_unroll_the_layers_and_other_backends_scan():
    assert layer_loop_for("auto", "gpu") == UNROLLED
    assert layer_loop_for("auto", "cpu") == SCAN and layer_loop_for("auto", "tpu") == SCAN
    assert layer_loop_for(SCAN, "gpu") == SCAN
    # A cache kept as an array per layer (the TPU kernel's) is indexed statically: unrolled.
    assert layer_loop_for("auto", "tpu", cache_per_layer=True) == UNROLLED
    with pytest.raises(ValueError, match="scan"):
        layer_loop_for(SCAN, "tpu", cache_per_layer=True)
    with pytest.raises(ValueError, match="layer_loop"):
        EngineConfig(layer_loop="while")


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_the_gpus_decode_step_reads_every_weight_where_it_lies(quantization):
    gpu_form = runner_with(layer_loop_for("auto", "gpu"), quantization)
    assert weights_sliced(gpu_form) == set()
    per_layer = weight_types(gpu_form)  # arrays of their own: no leading [layers] axis
    assert per_layer and all(not shape.startswith(f"{TINY.num_layers}x") for shape in per_layer), per_layer
    # The detector sees the copies' cause where it is: the scan slices every stacked weight.
    scan = runner_with(SCAN, quantization)
    assert weights_sliced(scan) == weight_types(scan)


def test_the_detector_sees_static_slices_of_a_stack():
    """The form the GPU served before 2026-11-27: `stacked[i]`, a static slice, which XLA's
    GPU backend copied inside the step's loop over decode rounds."""
    stacked = jax.ShapeDtypeStruct((TINY.num_layers, 64, 32), np.float32)
    module = jax.jit(lambda weights, x: sum(x @ weights[i] for i in range(TINY.num_layers))).lower(
        stacked, jax.ShapeDtypeStruct((1, 64), np.float32)).as_text()
    assert "3x64x32xf32" in sliced_types(module)


def test_the_native_cpu_kernels_read_int8_layers_in_place_under_the_scan():
    """The scan passes the native kernel each int8 stack and the layer's index instead of a
    slice (engine/models/layers.py native_layer_weights): none of them is sliced out."""
    require_native_kernels()
    runner = runner_with(SCAN, "int8", cpu_kernels="native")
    int8_stacks = {tensor_type(leaf) for name in ("wqkv", "wo", "w_gate_up", "w_down")
                   for leaf in jax.tree_util.tree_leaves(runner.state["layers"][name])}
    sliced = weights_sliced(runner)
    assert sliced and not sliced & int8_stacks, sliced


def test_both_forms_compute_the_reference_forward():
    prompt = list(np.random.default_rng(2).integers(0, TINY.vocab_size, 7))
    expected = forward(TINY, random_params(TINY, seed=4), prompt)
    for layer_loop in (SCAN, UNROLLED):
        logits = runner_with(layer_loop).hidden_logits([RowPlan(prompt, 0, [1, 2])])
        assert np.max(np.abs(logits - expected)) / np.max(np.abs(expected)) < 1e-4, layer_loop
