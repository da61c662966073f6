"""PEFT LoRA adapters written as PEFT writes them (adapter_config.json and
adapter_model.safetensors), and the merged weights W + scale B A they stand for, computed
in NumPy apart from the engine (tests/engine/test_lora.py and the API's LoRA tests)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from engine.config import LORA_TARGETS, ModelConfig

# PEFT module -> the checkpoint weight it adapts (engine/models/params.py) and its (out, in).
CHECKPOINT_NAMES = {"q_proj": "wq", "k_proj": "wk", "v_proj": "wv", "o_proj": "wo", "gate_proj": "w_gate",
                    "up_proj": "w_up", "down_proj": "w_down"}
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def module_shape(config: ModelConfig, module: str) -> tuple[int, int]:
    hidden, inner, q, kv = config.hidden_size, config.intermediate_size, config.q_size, config.kv_size
    return {"q_proj": (q, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden), "o_proj": (hidden, q),
            "gate_proj": (inner, hidden), "up_proj": (inner, hidden), "down_proj": (hidden, inner)}[module]


def random_adapter(config: ModelConfig, rank: int, seed: int, targets=LORA_TARGETS, layers=None,
                   magnitude: float = 0.3) -> dict:
    """{(layer, module): (A [r, in], B [out, r])}, random, large enough to change the outputs."""
    rng = np.random.default_rng(seed)
    pairs = {}
    for layer in range(config.num_layers) if layers is None else layers:
        for module in targets:
            out, inner = module_shape(config, module)
            a = rng.standard_normal((rank, inner)).astype(np.float32) * magnitude / math.sqrt(inner)
            b = rng.standard_normal((out, rank)).astype(np.float32) * magnitude / math.sqrt(rank)
            pairs[(layer, module)] = (a, b)
    return pairs


def write_adapter(directory: Path, pairs: dict, rank: int, alpha: float, *, rslora: bool = False,
                  extra_config: dict | None = None, base: str = "tiny-random") -> Path:
    """`pairs` saved in PEFT's layout and names; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for (layer, module), (a, b) in pairs.items():
        block = "self_attn" if module in ATTENTION else "mlp"
        key = f"base_model.model.model.layers.{layer}.{block}.{module}"
        tensors[f"{key}.lora_A.weight"], tensors[f"{key}.lora_B.weight"] = a, b
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    targets = sorted({module for _, module in pairs})
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": targets, "bias": "none",
              "use_rslora": rslora, "task_type": "CAUSAL_LM", "base_model_name_or_path": base,
              "fan_in_fan_out": False, "lora_dropout": 0.0, **(extra_config or {})}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    return directory


def merged_params(params: dict, pairs: dict, scale: float) -> dict:
    """The checkpoint's weights with each adapted W replaced by W + scale B A (float64 math)."""
    layers = {name: np.array(value, dtype=np.float64) for name, value in params["layers"].items()}
    for (layer, module), (a, b) in pairs.items():
        layers[CHECKPOINT_NAMES[module]][layer] += scale * (b.astype(np.float64) @ a.astype(np.float64))
    return {**params, "layers": {name: value.astype(np.float32) for name, value in layers.items()}}
