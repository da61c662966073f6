"""The forward's loop over layers (engine/models/llama.py): a scan on the CPU, unrolled on GPUs.

XLA's GPU backend copied every layer's weights out of the stacked arrays before a scan's
matmuls read them: 55% of an 8B decode step on an H100 (issue 24). The GPU's form must read
them where they lie. This is checked on the structure of the program, from any machine: the
decode step that a GPU compiles, lowered here, takes no dynamic slice of a stacked weight.
The same check finds the slices in the scan, so putting the scan back on GPUs fails it.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from numpy_reference import forward

from engine.config import SCAN, UNROLLED, EngineConfig, ModelConfig
from engine.device import native
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


def stacked_weight_types(runner: ModelRunner) -> set[str]:
    """The MLIR tensor types (`3x64x32xf32`) of the stacked per-layer weights."""
    leaves = jax.tree_util.tree_leaves(runner.state["layers"])
    return {"x".join(map(str, leaf.shape)) + "x" + _mlir_dtype(leaf.dtype) for leaf in leaves}


def _mlir_dtype(dtype) -> str:
    return {"float32": "f32", "bfloat16": "bf16", "int8": "i8"}[np.dtype(dtype).name]


def weights_sliced_dynamically(runner: ModelRunner) -> set[str]:
    """The stacked weights that the one-token decode step takes a dynamic slice of."""
    batch = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), runner._empty_batch(1))
    steps = jax.ShapeDtypeStruct((), np.int32)
    module = runner._step.lower(runner.state, runner._abstract_kv_cache, batch, steps).as_text()
    sliced = set(re.findall(r"stablehlo\.dynamic_slice [^\n]*?: \(tensor<([0-9a-z]+)>", module))
    return sliced & stacked_weight_types(runner)


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
    assert weights_sliced_dynamically(gpu_form) == set()
    # The detector sees the copies' cause where it is: the scan slices every stacked weight.
    assert weights_sliced_dynamically(runner_with(SCAN, quantization)) == stacked_weight_types(gpu_form)


def test_the_native_cpu_kernels_read_int8_layers_in_place_under_the_scan():
    """The scan passes the native kernel each int8 stack and the layer's index instead of a
    slice (engine/models/layers.py native_layer_weights): none of them is sliced out."""
    if not native.available():
        pytest.skip("the native CPU kernels were not built here")
    runner = runner_with(SCAN, "int8", cpu_kernels="native")
    int8_stacks = {"x".join(map(str, leaf.shape)) + "x" + _mlir_dtype(leaf.dtype)
                   for name in ("wqkv", "wo", "w_gate_up", "w_down")
                   for leaf in jax.tree_util.tree_leaves(runner.state["layers"][name])}
    sliced = weights_sliced_dynamically(runner)
    assert sliced and not sliced & int8_stacks, sliced


def test_both_forms_compute_the_reference_forward():
    prompt = list(np.random.default_rng(2).integers(0, TINY.vocab_size, 7))
    expected = forward(TINY, random_params(TINY, seed=4), prompt)
    for layer_loop in (SCAN, UNROLLED):
        logits = runner_with(layer_loop).hidden_logits([RowPlan(prompt, 0, [1, 2])])
        assert np.max(np.abs(logits - expected)) / np.max(np.abs(expected)) < 1e-4, layer_loop
