"""Write tiny FP8 checkpoints as they are published (engine/loader/fp8_checkpoint.py reads
them), from a weights pytree.

Written independently of the engine: the quantizers below follow the layouts' documentation
(Hugging Face's fine-grained FP8, compressed-tensors' float-quantized), in NumPy with
ml_dtypes' e4m3 cast, and the files go through safetensors' own writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
from loader_files import hf_config_json, hf_tensors
from safetensors.numpy import save_file

from engine.config import ModelConfig


PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
E4M3_MAX = 448.0


def e4m3(array: np.ndarray) -> np.ndarray:
    return np.clip(array, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)


def fp8_blocks(weight: np.ndarray, block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Fine-grained FP8 as Hugging Face's quantizer writes it: e4m3 values, and per block of
    block[0] rows x block[1] inputs the float32 factor that gives the weight back
    (`weight_scale_inv`), the block's largest magnitude over 448."""
    rows, inputs = block
    out, width = weight.shape
    scale_inv = np.zeros((-(-out // rows), -(-width // inputs)), np.float32)
    values = np.zeros(weight.shape, ml_dtypes.float8_e4m3fn)
    for r in range(scale_inv.shape[0]):
        for c in range(scale_inv.shape[1]):
            part = weight[r * rows:(r + 1) * rows, c * inputs:(c + 1) * inputs]
            scale_inv[r, c] = np.abs(part).max() / E4M3_MAX or 1.0
            values[r * rows:(r + 1) * rows, c * inputs:(c + 1) * inputs] = e4m3(part / scale_inv[r, c])
    return values, scale_inv


def fp8_channels(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """compressed-tensors' FP8 with strategy "channel": e4m3 values and a scale per row [out, 1]."""
    scale = (np.abs(weight).max(axis=1, keepdims=True) / E4M3_MAX).astype(np.float32)
    scale[scale == 0] = 1.0
    return e4m3(weight / scale), scale


def fp8_quantization_config(layout: str, block: tuple[int, int]) -> dict:
    if layout == "fine-grained":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": list(block)}
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "dynamic": False}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": {"num_bits": 8, "type": "float",
                                                                "strategy": "token", "dynamic": True}}}}


def write_hf_fp8(directory: Path, config: ModelConfig, params: dict, arch: str, layout: str,
                 block: tuple[int, int] = (128, 128)) -> dict[str, np.ndarray]:
    """A Hugging Face directory with every layer projection in FP8, in `layout` ("fine-grained":
    weight_block_size blocks and weight_scale_inv; "compressed-tensors": a per-channel
    weight_scale in bfloat16), the rest in bfloat16, written through safetensors' own writer
    (whose NumPy side writes float8, though it cannot read it). Returns the tensors the
    file's values and scales stand for, in float32."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {**hf_config_json(config, arch), "torch_dtype": "bfloat16",
                "quantization_config": fp8_quantization_config(layout, block)}
    (directory / "config.json").write_text(json.dumps(document))
    entries, meant = {}, {}
    for name, array in hf_tensors(config, params).items():
        array = np.asarray(array, np.float32)
        if name.removesuffix(".weight").split(".", 3)[-1] in PROJECTIONS:
            if layout == "fine-grained":
                values, scale = fp8_blocks(array, block)
                entries[name.removesuffix("weight") + "weight_scale_inv"] = scale
                widened = np.repeat(np.repeat(scale, block[0], 0), block[1], 1)[:array.shape[0], :array.shape[1]]
            else:
                values, scale = fp8_channels(array)
                scale = scale.astype(ml_dtypes.bfloat16)
                entries[name.removesuffix("weight") + "weight_scale"] = scale
                widened = scale.astype(np.float32)
            entries[name] = values
            meant[name] = values.astype(np.float32) * widened
        else:
            entries[name] = array.astype(ml_dtypes.bfloat16)
            meant[name] = entries[name].astype(np.float32)
    save_file({name: np.ascontiguousarray(array) for name, array in entries.items()}, directory / "model.safetensors")
    return meant
