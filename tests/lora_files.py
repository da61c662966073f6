"""PEFT LoRA adapters written as PEFT writes them (adapter_config.json and
adapter_model.safetensors: tools/make_lora.py), and the merged weights W + scale B A they
stand for, computed in NumPy apart from the engine (tests/engine/test_lora.py and the API's
LoRA tests)."""

from __future__ import annotations

import numpy as np

from tools.make_lora import random_adapter, write_adapter

__all__ = ["CHECKPOINT_NAMES", "merged_params", "random_adapter", "write_adapter"]

# PEFT module -> the checkpoint weight it adapts (engine/models/params.py).
CHECKPOINT_NAMES = {"q_proj": "wq", "k_proj": "wk", "v_proj": "wv", "o_proj": "wo", "gate_proj": "w_gate",
                    "up_proj": "w_up", "down_proj": "w_down"}


def merged_params(params: dict, pairs: dict, scale: float) -> dict:
    """The checkpoint's weights with each adapted W replaced by W + scale B A (float64 math)."""
    layers = {name: np.array(value, dtype=np.float64) for name, value in params["layers"].items()}
    for (layer, module), (a, b) in pairs.items():
        layers[CHECKPOINT_NAMES[module]][layer] += scale * (b.astype(np.float64) @ a.astype(np.float64))
    return {**params, "layers": {name: value.astype(np.float32) for name, value in layers.items()}}
