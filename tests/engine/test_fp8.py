"""FP8 weights (engine/device/fp8.py) and FP8 checkpoints as published (engine/loader/fp8_checkpoint.py).

The expected values are computed here in NumPy with ml_dtypes' e4m3 casts, and the tiny
checkpoints are written by tests/fp8_files.py's own quantizers through safetensors'
serializer; the quality gate on SmolLM2 is in test_quantization.py.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from fp8_files import E4M3_MAX, PROJECTIONS, write_hf_fp8
from numpy_reference import forward

from engine.config import EngineConfig, ModelConfig
from engine.device import fp8
from engine.device import weights as served_form
from engine.device.runner import ModelRunner, RowPlan
from engine.device.sharding import make_mesh, param_shardings
from engine.device.weights import serving_weights
from engine.loader import served_cache
from engine.loader.checkpoint import load_checkpoint
from engine.loader.hf import load_hf_config
from engine.loader.serving import served_config
from engine.loader.source import resolve_model
from engine.models.params import random_params

TINY = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8)
ENGINE = EngineConfig(max_model_len=128, max_num_seqs=4, max_num_batched_tokens=64, page_size=4, num_pages=80)
LAYER_NAMES = dict(zip(("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"), PROJECTIONS))


def e4m3_rows(matrix):
    """Per-row e4m3 in NumPy: values and scales, each row's largest magnitude at 448."""
    scales = np.abs(matrix).max(axis=-1, keepdims=True) / E4M3_MAX
    return (matrix / scales).astype(ml_dtypes.float8_e4m3fn), scales.astype(np.float32)


def test_quantize_fp8_holds_each_row_in_e4m3_with_its_largest_value_at_448():
    matrix = np.random.default_rng(0).standard_normal((3, 16, 40)).astype(np.float32)
    weight = fp8.quantize_fp8(matrix)
    values, scales = e4m3_rows(matrix)
    assert weight.values.dtype == jnp.float8_e4m3fn and weight.scales.shape == (3, 16, 1)
    np.testing.assert_array_equal(np.asarray(weight.values), values)
    np.testing.assert_allclose(np.asarray(weight.scales), scales, rtol=1e-6)
    assert np.all(np.abs(np.asarray(weight.values, np.float32)).max(-1) == E4M3_MAX)
    # Three mantissa bits: within half a step, 1/16 of the value, of the matrix.
    error = np.abs(np.asarray(fp8.widened_groups(weight.values, weight.scales)) - matrix)
    assert np.all(error <= np.abs(matrix) / 16 + scales * 2.0 ** -9)


@pytest.mark.parametrize("per_token", [False, True])
def test_fp8_product_matches_numpy(per_token):
    """Weights alone: the e4m3 values times x, then each row's scale. With FP8 activations
    (the accelerators' form), x quantized per token as well."""
    rng = np.random.default_rng(1)
    x, matrix = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal((48, 64)).astype(np.float32)
    weight = fp8.quantize_fp8(matrix, per_token_activations=per_token)
    values, scales = e4m3_rows(matrix)
    if per_token:
        x_values, x_scales = e4m3_rows(x)
        x = x_values.astype(np.float32) * x_scales
    expected = x @ (values.astype(np.float32) * scales).T
    actual = np.asarray(fp8.linear(jnp.asarray(x), weight))
    np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=2e-5)


def test_activations_past_e4m3s_range_saturate_rather_than_become_nan():
    x = jnp.asarray([[1e30, -3.0, 0.0, 1e-30]], jnp.float32)
    tokens, scales = fp8.e4m3_rows(x)
    assert np.all(np.isfinite(np.asarray(tokens, np.float32)))
    assert float(tokens[0, 0].astype(jnp.float32)) == E4M3_MAX
    assert np.all(np.isfinite(np.asarray(fp8.saturated(jnp.asarray([1e9, -1e9])).astype(jnp.float32))))


@pytest.mark.parametrize("per_token, layer_loop", [(False, "scan"), (True, "scan"), (True, "unrolled")])
def test_fp8_model_is_close_to_the_float_reference(per_token, layer_loop, monkeypatch):
    """Both forms of the product, and the accelerators' form in the GPU's layer loop (each
    layer's weights an Fp8Weight of its own)."""
    monkeypatch.setattr(served_form, "default_per_token_activations", lambda: per_token)
    params = random_params(TINY, seed=3)
    prompt = list(np.random.default_rng(1).integers(0, TINY.vocab_size, 23))
    runner = ModelRunner(TINY, dataclasses.replace(_fp8(ENGINE), layer_loop=layer_loop), params)
    served = runner.state["layers"]["wqkv" if layer_loop == "scan" else "wqkv_1"]
    assert isinstance(served, fp8.Fp8Weight) and served.per_token_activations == per_token
    logits = runner.hidden_logits([RowPlan(prompt, 0, list(range(1, 7)))])
    expected = forward(TINY, params, prompt)
    error = np.max(np.abs(logits - expected)) / np.max(np.abs(expected))
    assert 1e-6 < error < 0.1  # it ran on e4m3 values, and they are close
    # A random model's logits lie close together; SmolLM2's gate (test_quantization.py) asks 95%.
    assert np.mean(logits.argmax(-1) == expected.argmax(-1)) >= 0.75


def _fp8(config: EngineConfig) -> EngineConfig:
    return dataclasses.replace(config, quantization="fp8")


def reference_params(params: dict, meant: dict[str, np.ndarray]) -> dict:
    """What a checkpoint written by write_hf_fp8 stands for: bfloat16 for the rest, and each
    projection its e4m3 values times their scales."""
    reference = jax.tree.map(lambda array: np.asarray(array).astype(ml_dtypes.bfloat16).astype(np.float32), params)
    for name, projection in LAYER_NAMES.items():
        reference["layers"][name] = np.stack([meant[f"model.layers.{i}.{projection}.weight"]
                                              for i in range(TINY.num_layers)])
    return reference


# Blocks of 24 rows: a projection of 32 rows ends in a part block, as published files may.
LAYOUTS = [("fine-grained", (24, 16)), ("compressed-tensors", None)]


@pytest.mark.parametrize("layout, block", LAYOUTS)
def test_a_published_fp8_checkpoint_is_served_from_its_own_values(tmp_path, layout, block):
    params = random_params(TINY, seed=5)
    meant = write_hf_fp8(tmp_path / "model", TINY, params, "llama", layout, block or (128, 128))
    source = resolve_model(str(tmp_path / "model"))
    assert served_config(EngineConfig(quantization="auto"), source).quantization == "fp8"
    checkpoint = load_checkpoint(source)
    wq = checkpoint.params["layers"]["wq"]
    assert isinstance(wq, fp8.Fp8Weight)
    published = np.stack([meant[f"model.layers.{i}.self_attn.q_proj.weight"] for i in range(TINY.num_layers)])
    np.testing.assert_array_equal(np.asarray(fp8.widened_groups(wq.values, wq.scales)), published)
    assert wq.scales.shape == (TINY.num_layers, TINY.q_size, TINY.hidden_size // block[1] if block else 1)

    runner = ModelRunner(TINY, _fp8(ENGINE), checkpoint.params)
    prompt = list(np.random.default_rng(2).integers(0, TINY.vocab_size, 19))
    logits = runner.hidden_logits([RowPlan(prompt, 0, list(range(1, 7)))])
    expected = forward(TINY, reference_params(params, meant), prompt)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_a_published_fp8_checkpoint_served_unquantized_is_widened(tmp_path):
    params = random_params(TINY, seed=6)
    meant = write_hf_fp8(tmp_path / "model", TINY, params, "llama", "compressed-tensors")
    checkpoint = load_checkpoint(tmp_path / "model")
    served = serving_weights(TINY, checkpoint.params, "float32", "none")
    assert served["layers"]["wo"].dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(served["layers"]["wo"][1]), meant["model.layers.1.self_attn.o_proj.weight"])


def test_fp8_served_weights_are_kept_and_read_back(tmp_path):
    served = serving_weights(TINY, random_params(TINY, seed=7), "float32", "fp8")
    path = tmp_path / "kept.safetensors"
    served_cache.save(path, jax.device_get(served))
    again = served_cache.load(path)
    for name in ("wqkv", "w_down"):
        assert isinstance(again["layers"][name], fp8.Fp8Weight)
        np.testing.assert_array_equal(np.asarray(again["layers"][name].values), np.asarray(served["layers"][name].values))
        np.testing.assert_array_equal(again["layers"][name].scales, np.asarray(served["layers"][name].scales))


REFUSED = [
    ({"quant_method": "gptq", "bits": 4}, "quant_method 'gptq'"),
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
     "activation_scheme 'static'"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "weight_block_size None"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized"}, "format 'pack-quantized'"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}},
     "config_groups.group_0.weights.num_bits 4"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "block"}}}}, "weights.strategy 'block'"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}}}},
     "input_activations.dynamic false"),
]


@pytest.mark.parametrize("quantization, named", REFUSED)
def test_a_quantization_flint_cannot_read_is_refused_by_name(tmp_path, quantization, named):
    write_hf_fp8(tmp_path / "model", TINY, random_params(TINY, seed=8), "llama", "compressed-tensors")
    document = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps({**document, "quantization_config": quantization}))
    with pytest.raises(ValueError, match="quantization_config") as refused:
        load_hf_config(tmp_path / "model")
    assert named in str(refused.value)


def test_a_published_fp8_checkpoint_is_placed_by_the_served_shardings(tmp_path):
    """Loaded onto the devices as `flint serve` loads it (engine/loader/serving.py): each
    weight's scales laid out with its values."""
    write_hf_fp8(tmp_path / "model", TINY, random_params(TINY, seed=9), "llama", "fine-grained", (16, 16))
    mesh = make_mesh(ENGINE)
    checkpoint = load_checkpoint(tmp_path / "model", shardings=lambda c, p: param_shardings(c, mesh, p))
    w_down = checkpoint.params["layers"]["w_down"]
    assert isinstance(w_down, fp8.Fp8Weight) and isinstance(w_down.scales, jax.Array)
    assert w_down.values.dtype == jnp.float8_e4m3fn and w_down.scales.shape == (TINY.num_layers, 32, 4)
    assert all(isinstance(leaf.sharding, jax.sharding.NamedSharding) for leaf in jax.tree.leaves(w_down))
