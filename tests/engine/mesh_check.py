"""Run in a subprocess with 4 host devices: tensor-parallel logits equal single-device logits."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

import engine.device.runner
from engine.config import EngineConfig, ModelConfig
from engine.device.attention import over_mesh, reference_attention
from engine.device.runner import ModelRunner, RowPlan
from engine.loader.lora import LoraAdapter, load_lora
from engine.models.params import random_params
from tools import make_lora

config = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=8, num_kv_heads=4, head_dim=8)
params = random_params(config, seed=7)
prompt = list(np.random.default_rng(0).integers(0, 96, 21))


def run(mesh_shape):
    engine = EngineConfig(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=32,
                          page_size=4, num_pages=40, mesh_shape=mesh_shape)
    runner = ModelRunner(config, engine, params)
    prefill = runner.hidden_logits([RowPlan(prompt[:20], 0, list(range(1, 7)))])
    decode = runner.hidden_logits([RowPlan(prompt[20:], 20, list(range(1, 7)))])
    return runner, np.concatenate([prefill, decode])


def random_adapter(seed: int) -> LoraAdapter:
    """Rank 2 on every projection, large enough to move the logits, as PEFT files read back."""
    with tempfile.TemporaryDirectory() as directory:
        path = make_lora.write_adapter(Path(directory) / "tp", make_lora.random_adapter(config, 2, seed, magnitude=1.0), 2, 4.0)
        return load_lora("tp", path, config)


def run_adapted(mesh_shape):
    """Logits of a row under a LoRA adapter beside a base row, in one step."""
    engine = EngineConfig(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=64,
                          page_size=4, num_pages=40, mesh_shape=mesh_shape, max_loras=2, max_lora_rank=4)
    runner = ModelRunner(config, engine, params)
    runner.load_adapter(1, random_adapter(3))
    return runner.hidden_logits([RowPlan(prompt, 0, list(range(1, 7)), adapter_slot=1),
                                 RowPlan(prompt, 0, list(range(7, 13)))])


single_runner, single = run((1,))
adapted_single, adapted_sharded = run_adapted((1,)), run_adapted((4,))
sharded_runner, sharded = run((4,))
# The wrapper that runs a kernel once per device on its own heads (engine/device/attention over_mesh),
# around the reference: GPU interpret mode cannot run a kernel on several simulated devices.
engine.device.runner.attention_for = lambda name, mesh, num_kv: over_mesh(reference_attention, mesh, num_kv)
_, per_device = run((4,))
wq = sharded_runner.state["layers"]["wqkv"]
print(json.dumps({
    "devices": len(jax.devices()),
    "wq_spec": str(wq.sharding.spec),
    "wq_devices": len(wq.sharding.device_set),
    "cache_spec": str(sharded_runner.kv_cache.k.sharding.spec),
    "max_relative_error": float(np.max(np.abs(single - sharded)) / np.max(np.abs(single))),
    "per_device_attention_error": float(np.max(np.abs(single - per_device)) / np.max(np.abs(single))),
    "lora_relative_error": float(np.max(np.abs(adapted_single - adapted_sharded)) / np.max(np.abs(adapted_single))),
    "lora_change": float(np.max(np.abs(adapted_single[:21] - adapted_single[21:])) / np.max(np.abs(adapted_single))),
}))
sys.exit(0)
