"""FP8 checkpoints as they are published: the scheme in config.json's `quantization_config`,
and each quantized projection read as an Fp8Weight (engine/device/fp8.py) of its own values.

Two layouts are read:
- Hugging Face's fine-grained FP8 (`quant_method: "fp8"`, as Qwen3's and DeepSeek-V3's FP8
  checkpoints ship): `weight` e4m3 [out, in] and `weight_scale_inv` float32
  [ceil(out / bo), ceil(in / bi)] for `weight_block_size` [bo, bi]. The weight is its values
  times their block's entry ("inv": the inverse of the factor they were quantized with). A
  block's scale is repeated over its bo rows, so the served weight has a scale per row and
  group of bi inputs, and no value is rounded again.
- compressed-tensors' FP8 (`quant_method: "compressed-tensors"`, `format: "float-quantized"`,
  as the FP8-Dynamic checkpoints ship): `weight` e4m3 [out, in] and `weight_scale` [out, 1]
  (strategy "channel") or one value (strategy "tensor"): a scale per row, the served layout.

Whatever else a `quantization_config` says (GPTQ, AWQ, bitsandbytes, compressed-tensors'
integer, grouped or block schemes, static activation scales) is refused by name: its tensors
would otherwise be read as weights they are not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from engine.device.fp8 import Fp8Weight

FINE_GRAINED = "fp8"  # Hugging Face's quant_method
COMPRESSED_TENSORS = "compressed-tensors"
FLOAT_FORMATS = ("float-quantized", "naive-quantized")  # compressed-tensors' formats of float values


@dataclass(frozen=True)
class Fp8Scheme:
    """How a checkpoint's quantized projections are stored."""

    scale_suffix: str  # the scale tensor's name is the weight's with "weight" replaced by it
    block: tuple[int, int] | None = None  # fine-grained: [rows, inputs] under one scale


def fp8_scheme(config_json: dict) -> Fp8Scheme | None:
    """The FP8 scheme `config_json` declares; None for an unquantized checkpoint; ValueError
    naming the setting for one Flint does not read."""
    quantization = config_json.get("quantization_config")
    if not quantization:
        return None
    method = quantization.get("quant_method")
    if method == FINE_GRAINED:
        return _fine_grained(quantization)
    if method == COMPRESSED_TENSORS:
        return _compressed_tensors(quantization)
    raise ValueError(f"quantization_config.quant_method {method!r} is not supported: Flint reads FP8 checkpoints "
                     f"({FINE_GRAINED!r}, {COMPRESSED_TENSORS!r} float-quantized) and unquantized ones")


def _fine_grained(quantization: dict) -> Fp8Scheme:
    scheme = quantization.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        raise ValueError(f"quantization_config.activation_scheme {scheme!r} is not supported: Flint scales "
                         "activations per token as it runs (\"dynamic\")")
    block = quantization.get("weight_block_size")
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(n, int) and n > 0 for n in block)):
        raise ValueError(f"quantization_config.weight_block_size {block!r} is not supported: a [rows, inputs] pair")
    return Fp8Scheme("weight_scale_inv", (block[0], block[1]))


def _compressed_tensors(quantization: dict) -> Fp8Scheme:
    form = quantization.get("format")
    if form not in FLOAT_FORMATS:
        raise ValueError(f"quantization_config.format {form!r} is not supported: Flint reads compressed-tensors' "
                         f"FP8 ({', '.join(FLOAT_FORMATS)})")
    for name, group in (quantization.get("config_groups") or {}).items():
        _check_group(f"quantization_config.config_groups.{name}", group)
    return Fp8Scheme("weight_scale")


def _check_group(where: str, group: dict) -> None:
    weights = group.get("weights") or {}
    wanted = {"num_bits": 8, "type": "float", "symmetric": True}
    for key, value in wanted.items():
        if weights.get(key, value) != value:
            raise ValueError(f"{where}.weights.{key} {weights.get(key)!r} is not supported: FP8 weights are "
                             f"{key} {value!r}")
    if weights.get("strategy") not in ("channel", "tensor"):
        raise ValueError(f"{where}.weights.strategy {weights.get('strategy')!r} is not supported: a scale per "
                         "channel or per tensor")
    activations = group.get("input_activations")
    if activations and not activations.get("dynamic", False):
        raise ValueError(f"{where}.input_activations.dynamic false is not supported: Flint scales activations per "
                         "token as it runs")


def scheme_of(directory: str | Path) -> Fp8Scheme | None:
    """The FP8 scheme of the Hugging Face checkpoint in `directory` (None: unquantized)."""
    return fp8_scheme(json.loads((Path(directory) / "config.json").read_text()))


def published_quantization(source) -> str:
    """"fp8" for a Hugging Face checkpoint published in FP8, else "none" (a ModelSource)."""
    if source.format != "hf" or source.path is None or not (Path(source.path) / "config.json").is_file():
        return "none"
    return "fp8" if scheme_of(source.path) is not None else "none"


def scale_name(weight_name: str, scheme: Fp8Scheme) -> str:
    return weight_name.removesuffix("weight") + scheme.scale_suffix


def fp8_weight(name: str, values: np.ndarray, scale: np.ndarray, scheme: Fp8Scheme) -> Fp8Weight:
    """Tensor `name` [out, in] of e4m3 `values` and its published `scale`, as an Fp8Weight
    of host arrays with scales [out, groups]; ValueError naming it where they do not fit."""
    if values.dtype != ml_dtypes.float8_e4m3fn or values.ndim != 2:
        raise ValueError(f"tensor {name} is {values.dtype} {list(values.shape)}: FP8 weights are e4m3 [out, in]")
    out, width = values.shape
    scale = np.asarray(scale, np.float32)
    if scheme.block is None:
        if scale.size not in (1, out):
            raise ValueError(f"tensor {scale_name(name, scheme)} has shape {list(scale.shape)}: one scale, or one "
                             f"per row of {out}")
        rows = np.broadcast_to(scale.reshape(-1, 1), (out, 1))
    else:
        rows = _block_rows(name, scale, out, width, scheme)
    return Fp8Weight(values, np.ascontiguousarray(rows))


def _block_rows(name: str, scale: np.ndarray, out: int, width: int, scheme: Fp8Scheme) -> np.ndarray:
    block_rows, block_inputs = scheme.block
    expected = (-(-out // block_rows), -(-width // block_inputs))
    if scale.shape != expected:
        raise ValueError(f"tensor {scale_name(name, scheme)} has shape {list(scale.shape)}, expected "
                         f"{list(expected)} for blocks of {list(scheme.block)}")
    if width % block_inputs:
        raise ValueError(f"tensor {name} has {width} inputs, not a whole number of blocks of {block_inputs}")
    return np.repeat(scale, block_rows, axis=0)[:out]
