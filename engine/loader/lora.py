"""LoRA adapters in PEFT's format: `adapter_config.json` and `adapter_model.safetensors`.

An adapter adds (scale) B A to some of a model's projections W [out, in], layer by layer:
A [r, in] and B [out, r] of rank r, with scale lora_alpha / r (lora_alpha / sqrt(r) with
rsLoRA). The engine applies it beside the base weights rather than merged into them
(engine/device/lora.py), so that one batch mixes rows of several adapters and of the base.

What PEFT can write but this engine would run wrongly is refused by name: DoRA, trained
biases, saved whole modules, per-module ranks, embedding or head adapters, fan-in-fan-out
layouts, a mixture of experts' experts. A tensor of a projection the engine does not adapt
is an error too, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from engine.config import LORA_TARGETS, ModelConfig

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
# base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight, with PEFT's optional
# adapter name (".default") before ".weight".
KEY = re.compile(r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.(?:self_attn|mlp)\."
                 r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.lora_([AB])(?:\.[\w-]+)?\.weight$")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter's weights on the host, checked against the base model's shapes."""

    name: str
    path: str
    rank: int
    scale: float  # multiplies B A: lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA
    # PEFT module name -> (A [layers, r, in], B [layers, out, r]) float32; zeros in a layer it skips.
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False)
    # A digest of the files: KV computed under this adapter is found again only under the
    # very same weights (engine/host/adapters.py salts the prefix cache with it). No default:
    # two adapters with the same digest would share KV.
    digest: bytes
    base_model: str | None = None  # adapter_config's base_model_name_or_path, as written

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(name for name in LORA_TARGETS if name in self.weights)


def projection_shapes(model: ModelConfig) -> dict[str, tuple[int, int]]:
    """(out, in) of each projection an adapter may adapt."""
    hidden, inner = model.hidden_size, model.intermediate_size
    return {"q_proj": (model.q_size, hidden), "k_proj": (model.kv_size, hidden), "v_proj": (model.kv_size, hidden),
            "o_proj": (hidden, model.q_size), "gate_proj": (inner, hidden), "up_proj": (inner, hidden),
            "down_proj": (hidden, inner)}


def load_lora(name: str, path: str | Path, model: ModelConfig) -> LoraAdapter:
    """The adapter in directory `path` for a base of `model`; ValueError saying what is wrong."""
    directory = Path(path)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    if not config_path.is_file() or not weights_path.is_file():
        raise ValueError(f"{path} is not a PEFT LoRA adapter: it needs {CONFIG_FILE} and {WEIGHTS_FILE}")
    config_bytes, weights_bytes = config_path.read_bytes(), weights_path.read_bytes()
    try:
        config = json.loads(config_bytes)
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_path} is not JSON: {error}") from None
    rank, scale = check_config(config)
    tensors = load_file(str(weights_path))
    weights = stacked_weights(tensors, rank, model)
    digest = hashlib.blake2b(config_bytes + weights_bytes, digest_size=16).digest()
    return LoraAdapter(name=name, path=str(directory), rank=rank, scale=scale, weights=weights,
                       base_model=config.get("base_model_name_or_path"), digest=digest)


def check_config(config: dict) -> tuple[int, float]:
    """The rank and scale of a PEFT LoRA config, refusing the variants this engine cannot run."""
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"peft_type {config.get('peft_type')!r} is not LORA")
    refused = {"use_dora": "DoRA adapters are not supported", "fan_in_fan_out": "fan_in_fan_out layouts are not "
               "supported", "modules_to_save": "adapters that save whole modules are not supported",
               "rank_pattern": "per-module ranks (rank_pattern) are not supported",
               "alpha_pattern": "per-module alphas (alpha_pattern) are not supported"}
    for key, reason in refused.items():
        if config.get(key):
            raise ValueError(f"{reason} ({key} in {CONFIG_FILE})")
    if config.get("bias", "none") != "none":
        raise ValueError(f"adapters with trained biases are not supported (bias {config['bias']!r})")
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"r must be a positive integer, not {rank!r}")
    alpha = config.get("lora_alpha", rank)
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"lora_alpha must be a number, not {alpha!r}")
    return rank, float(alpha) / (math.sqrt(rank) if config.get("use_rslora") else rank)


def stacked_weights(tensors: dict[str, np.ndarray], rank: int, model: ModelConfig) -> dict:
    """Each adapted projection's A [layers, r, in] and B [layers, out, r], checked by shape."""
    shapes = projection_shapes(model)
    found: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for key, tensor in tensors.items():
        match = KEY.match(key)
        if match is None:
            raise ValueError(f"adapter tensor {key} adapts nothing this engine can adapt "
                             f"(only {', '.join(LORA_TARGETS)} of the decoder layers)")
        layer, module, which = int(match[1]), match[2], match[3]
        if layer >= model.num_layers:
            raise ValueError(f"adapter tensor {key} is for layer {layer}; the model has {model.num_layers}")
        if module in MLP_TARGETS and model.num_experts:
            raise ValueError(f"adapter tensor {key} adapts an MLP; this model's MLPs are experts, which "
                             "adapters cannot target here")
        out, inner = shapes[module]
        expected = (rank, inner) if which == "A" else (out, rank)
        if tensor.shape != expected:
            raise ValueError(f"adapter tensor {key} has shape {tensor.shape}, expected {expected}")
        found.setdefault(module, {}).setdefault(layer, {})[which] = tensor.astype(np.float32)
    if not found:
        raise ValueError("the adapter has no LoRA tensors")
    return {module: stack_layers(module, layers, shapes[module], rank, model.num_layers)
            for module, layers in found.items()}


def stack_layers(module: str, layers: dict, shape: tuple[int, int], rank: int, num_layers: int):
    out, inner = shape
    a = np.zeros((num_layers, rank, inner), np.float32)
    b = np.zeros((num_layers, out, rank), np.float32)
    for layer, pair in layers.items():
        if set(pair) != {"A", "B"}:
            raise ValueError(f"layer {layer}'s {module} has lora_{''.join(pair)} without its pair")
        a[layer], b[layer] = pair["A"], pair["B"]
    return a, b
