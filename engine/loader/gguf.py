"""GGUF checkpoints: metadata to a ModelConfig, tensors (any ggml type) to the weights pytree.

GGUFReader gives each tensor's data with the numpy shape reversed from ggml's `ne`: a
weight with ne = [in, out] reads as [out, in], PyTorch's layout and the one of
engine/models/params.py, so no tensor needs transposing.

llama.cpp's converter permutes the rows of the Q and K weights for architecture llama, so
that its interleaved RoPE rotates pairs (2i, 2i+1). The loader undoes it to get back the
Hugging Face head layout, where RoPE rotates the first half of each head against the
second. qwen2 and qwen3 are converted unpermuted (llama.cpp runs them with NeoX RoPE).
(Its converter permutes Q and K biases too, but a llama with biases also biases o_proj,
which this layout refuses.)
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from pathlib import Path

import gguf
import jax
import numpy as np

from engine.config import LINEAR, ModelConfig, RopeScaling
from engine.models import family_for_gguf, family_of
from engine.models.family import TensorNames
from engine.models.params import param_specs
from engine.loader.gguf_blocks import HEAD_BLOCKS, KEPT_LAYER_WEIGHTS, LAYER_BLOCKS, WeightFormats, blocks_of, \
    kept_or_reason
from engine.loader.progress import WEIGHTS, Progress, StageCount

HEADS = ("embed", "lm_head")

# ggml types that gguf.quants.dequantize leaves out because they are plain numbers.
_PLAIN_TYPES = {
    gguf.GGMLQuantizationType.F64, gguf.GGMLQuantizationType.I8, gguf.GGMLQuantizationType.I16,
    gguf.GGMLQuantizationType.I32, gguf.GGMLQuantizationType.I64,
}

_REQUIRED = object()


@functools.lru_cache(maxsize=1)
def read_gguf(path: str | Path) -> gguf.GGUFReader:
    """Parse a GGUF file's header. Tensor data stays memory-mapped until it is read.

    Cached: describing the model (engine/loader/source.py) and loading it read the same
    header, and parsing SmolLM2's (its tokenizer arrays above all) takes seconds."""
    return gguf.GGUFReader(str(path))


def config_from_gguf(fields: Mapping, tensor_names: Collection[str]) -> ModelConfig:
    """The ModelConfig from a GGUF file's metadata `fields` (GGUFReader.fields).

    `tensor_names` decides tie_word_embeddings: a tied model has no `output.weight`.
    """
    arch = _value(fields, "general.architecture")
    family = family_for_gguf(arch, experts=int(_value(fields, f"{arch}.expert_count", 0) or 0) > 0)

    def get(key: str, default=_REQUIRED):
        return _value(fields, f"{arch}.{key}", default)

    hidden, num_heads = int(get("embedding_length")), int(get("attention.head_count"))
    head_dim = int(get("attention.key_length", hidden // num_heads))
    _refuse_partial_rotary(get("rope.dimension_count", head_dim), head_dim)
    shared = dict(
        vocab_size=_vocab_size(fields, get("vocab_size", None)),
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=num_heads,
        num_kv_heads=_kv_heads(get("attention.head_count_kv", num_heads)),
        head_dim=head_dim,
        rms_norm_eps=_float32(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=_float32(get("rope.freq_base", 10000.0)),
        rope_scaling=_rope_scaling(get("rope.scaling.type", None), get("rope.scaling.factor", 1.0)),
        max_position_embeddings=int(get("context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensor_names,
        bos_token_id=_optional_int(_value(fields, "tokenizer.ggml.bos_token_id", None)),
        eos_token_ids=_end_token_ids(fields),
        family=family.name,
    )
    return ModelConfig(**{**shared, **family.gguf_features(get, arch)})


def _optional_int(value) -> int | None:
    return None if value is None else int(value)


def _field(fields: Mapping, key: str):
    if key not in fields:
        raise ValueError(f"GGUF metadata lacks {key}")
    return fields[key]


def _value(fields: Mapping, key: str, default=_REQUIRED):
    if key not in fields and default is not _REQUIRED:
        return default
    return _field(fields, key).contents()


def _float32(value) -> float:
    # GGUF stores float32: 1e-5 reads back as 9.99999974e-06. Its shortest float32 spelling
    # recovers the number the model was configured with.
    return float(str(np.float32(value)))


def _vocab_size(fields: Mapping, stated: int | None) -> int:
    # Older files state no {arch}.vocab_size; the tokenizer's token list then has its length.
    return int(stated) if stated else len(_field(fields, "tokenizer.ggml.tokens").data)


def _kv_heads(value) -> int:
    if isinstance(value, list):  # per-layer counts (OpenELM-style): not a Llama shape
        raise ValueError("GGUF with per-layer attention.head_count_kv is not supported")
    return int(value)


def _refuse_partial_rotary(rotary_dim: int, head_dim: int) -> None:
    if int(rotary_dim) != head_dim:
        raise ValueError(f"RoPE over {rotary_dim} of {head_dim} head dims is not supported")


def _rope_scaling(kind: str | None, factor: float) -> RopeScaling | None:
    # Llama 3.1 GGUFs carry their scaling as the rope_freqs tensor, not as these keys.
    if kind in (None, "none") or float(factor) == 1.0:
        return None
    if kind != LINEAR:
        raise ValueError(f"unsupported GGUF rope scaling type {kind!r}")
    return RopeScaling(factor=_float32(factor), kind=LINEAR)


def _end_token_ids(fields: Mapping) -> tuple[int, ...]:
    # llama.cpp ends generation on EOS, and on EOT / EOM where a model names them.
    keys = ("eos_token_id", "eot_token_id", "eom_token_id")
    ids = [_value(fields, f"tokenizer.ggml.{key}", None) for key in keys]
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


def dequantize(tensor) -> np.ndarray:
    """A GGUFReader tensor as float32, numpy shape (reversed ggml ne), whatever its type."""
    if tensor.tensor_type in _PLAIN_TYPES:
        array = np.asarray(tensor.data).astype(np.float32)
    else:
        array = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        array = array.astype(np.float32, copy=False)
    return array.reshape(tuple(reversed([int(n) for n in tensor.shape])))


def load_gguf_params(reader: gguf.GGUFReader, config: ModelConfig, progress: Progress | None = None,
                     formats: WeightFormats | None = None) -> dict:
    """The weights pytree (engine/models/params.py layout) from an open GGUF file: float32,
    or where `formats` is given, the projections of kept types as their own blocks
    (Int8Weights, engine/loader/gguf_blocks.py), `formats` told what each was read as;
    `progress` is told each tensor read (engine/loader/progress.py)."""
    tensors = {t.name: t for t in reader.tensors}
    family, specs = family_of(config), param_specs(config)
    permuted = _value(reader.fields, "general.architecture") in family.gguf_permuted_qk
    names = family.gguf_tensors
    _refuse_unused(tensors, config)
    count = StageCount(progress, WEIGHTS, len(tensors))  # each read once: ones it would not use were refused

    def read(name: str, heads: int | None = None, blocks=None):
        if name not in tensors:
            raise ValueError(f"GGUF file lacks tensor {name}")
        array = read_tensor(tensors[name], blocks, formats)
        count.advance()
        if heads is not None:
            array = jax.tree.map(lambda part: unpermute_rows(part, heads), array)
        if family.gguf_norm_offset and name.endswith("norm.weight"):
            array = array - np.float32(family.gguf_norm_offset)
        return array

    keep = formats is not None
    params = {name: read(names.top[name], blocks=HEAD_BLOCKS if keep and name in HEADS else None)
              for name in specs if name != "layers"}
    params["layers"] = {name: _stack(read, config, names, name, permuted, LAYER_BLOCKS if keep else None)
                        for name in specs["layers"]}
    if names.top.get("rope_freq_factors") in tensors:
        params["rope_freq_factors"] = np.array(read(names.top["rope_freq_factors"]))
    count.finish()
    return params


def _stack(read, config: ModelConfig, names: TensorNames, name: str, permuted: bool, blocks) -> np.ndarray:
    heads = None
    if permuted and name == "wq":
        heads = config.num_heads
    elif permuted and name == "wk":
        heads = config.num_kv_heads
    kept = blocks if name in KEPT_LAYER_WEIGHTS else None
    return names.stacked(lambda tensor: read(tensor, heads, kept), name, config)


def read_tensor(tensor, blocks: Collection | None, formats: WeightFormats | None):
    """A GGUFReader tensor as its blocks (an Int8Weight) where its type is among `blocks`,
    else as float32; `formats` told which, and why not where blocks were asked for."""
    if blocks is None:
        return dequantize(tensor)
    reason = kept_or_reason(tensor.tensor_type, blocks)
    formats.read(tensor.name, tensor.tensor_type.name, reason)
    if reason is not None:
        return dequantize(tensor)
    return blocks_of(tensor.data, tensor.tensor_type, tuple(reversed([int(n) for n in tensor.shape])))


def unpermute_rows(array: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation along axis 0 (rows are [heads * head_dim]).

    Within each head llama.cpp interleaved the two halves: GGUF row 2j + s holds HF row
    s * head_dim/2 + j. Reading the rows as [heads, head_dim/2, 2] and swapping the last
    two axes restores [heads, 2, head_dim/2].
    """
    rest = array.shape[1:]
    half = array.shape[0] // num_heads // 2
    return array.reshape(num_heads, half, 2, *rest).swapaxes(1, 2).reshape(array.shape)


def _refuse_unused(tensors: Mapping, config: ModelConfig) -> None:
    expected = family_of(config).gguf_tensors.expected(param_specs(config)["layers"], config)
    unused = sorted(name for name in tensors if name not in expected)
    if unused:
        raise ValueError(f"GGUF file has tensors this model does not use: {', '.join(unused[:5])}")
