"""GGUF block-format tensors for the tests: random valid blocks of each kept type
(engine/loader/gguf_blocks.py), and a tiny Llama GGUF file whose projections are in given
types, as llama-quantize would leave a Q4_K_M file (mixed types side by side).

Blocks are random bytes with their fp16 scale fields set to small positive numbers, so
every weight is finite and of a size a model runs with; gguf.quants dequantizes them
independently of Flint (the reference)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from loader_files import gguf_tensors, write_gguf

from engine.config import ModelConfig
from engine.loader.gguf_blocks import KEPT
from engine.models.params import random_params

Q = gguf.GGMLQuantizationType
# Where each type keeps its fp16 scales (d, and dmin or m), in bytes of a block.
SCALE_OFFSETS = {Q.Q8_0: (0,), Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
                 Q.Q5_0: (0,)}
SCALE_RANGE = {Q.Q8_0: (2e-3, 1e-2), Q.Q4_0: (5e-3, 3e-2), Q.Q4_1: (5e-3, 3e-2), Q.Q4_K: (2e-4, 1e-3),
               Q.Q5_K: (1e-4, 5e-4), Q.Q6_K: (1e-4, 5e-4), Q.Q5_0: (5e-3, 3e-2)}

# A Llama whose widths the K-quants' 256-input super-blocks divide, and whose rows fill
# the kernels' blocks of 16.
BLOCKS_CONFIG = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4,
                            num_kv_heads=2, head_dim=64, bos_token_id=1, eos_token_ids=(2,))


def random_blocks(qtype, shape: tuple[int, int], seed: int) -> np.ndarray:
    """Random valid blocks of `qtype` for a matrix [out, in]: GGUFReader's raw rows."""
    per_block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    out, width = shape
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (out, width // per_block, block_bytes), dtype=np.uint8)
    low, high = SCALE_RANGE[qtype]
    for offset in SCALE_OFFSETS[qtype]:
        scales = rng.uniform(low, high, data.shape[:-1]).astype(np.float16)
        data[..., offset:offset + 2] = scales[..., None].view(np.uint8)
    return data.reshape(out, -1)


def kept_weight(qtype, shape: tuple[int, int], seed: int):
    """(raw blocks, the matrix gguf.quants dequantizes them to) for `qtype`."""
    data = random_blocks(qtype, shape, seed)
    return data, gguf.quants.dequantize(data, qtype).reshape(shape).astype(np.float32)


def write_blocks_gguf(path: Path, types: dict[str, object], config: ModelConfig = BLOCKS_CONFIG,
                      seed: int = 0) -> Path:
    """A Llama GGUF file whose tensors named in `types` (GGUF names: blk.0.attn_q.weight) are
    random blocks of their type; the rest F32 from random params."""
    params = random_params(config, seed=seed)
    skip = tuple(types)
    shapes = {name: array.shape for name, array in gguf_tensors(config, params, "llama").items()}
    raw = {name: random_blocks(qtype, shapes[name], seed=index) for index, (name, qtype) in enumerate(types.items())}
    return write_gguf(path, config, params, "llama", skip=skip, raw=(raw, types))


def q4_k_m_types(config: ModelConfig = BLOCKS_CONFIG) -> dict[str, object]:
    """The types llama-quantize's Q4_K_M gives a Llama's tensors (as it gave tools/
    make_random_gguf.py's 1B): Q4_K, but Q6_K for the embedding and for attn_v and
    ffn_down in some layers (here layer 0's, not layer 1's)."""
    types = {"token_embd.weight": Q.Q6_K}
    if not config.tie_word_embeddings:
        types["output.weight"] = Q.Q6_K
    for layer in range(config.num_layers):
        for part in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            types[f"blk.{layer}.{part}.weight"] = Q.Q4_K
        for part in ("attn_v", "ffn_down"):
            types[f"blk.{layer}.{part}.weight"] = Q.Q6_K if layer == 0 else Q.Q4_K
    return types


__all__ = ["BLOCKS_CONFIG", "KEPT", "kept_weight", "q4_k_m_types", "random_blocks", "write_blocks_gguf"]
