"""GGUF's quantized blocks kept as they are: each tensor of a kept type read into an
Int8Weight (engine/device/integer_weight.py) of its own integers, scales and offsets, exactly.

Every kept format is, per group of 16 or 32 inputs of a row, weight = scale x q (+ min):
- Q8_0: 32 int8 q under an fp16 scale d. (The fp16 scales and offsets of Q8_0, Q4_0 and
  Q4_1 are kept as float16, exactly: a 4-bit row reads 5 bits a weight, not 6.)
- Q4_0: 32 4-bit q under d, as q - 8. Q4_1: 32 4-bit q under d, plus an fp16 min m.
- Q4_K and Q5_K: super-blocks of 256 inputs, 8 groups of 32 with 6-bit scales and mins
  under fp16 d and dmin: scale = d x sc, min = -dmin x m (each product of an 11-bit and a
  6-bit number: exact in float32). Q5_K's fifth bits lie apart from the nibbles.
- Q6_K: super-blocks of 256, 16 groups of 16 with int8 scales under fp16 d, q - 32.
A K-quant's weight keeps its d (and -dmin) too, as the factors of its scales (and offsets):
the native kernels read the small integers and the factors, as ggml does, in place of
float32 scales (Int8Weight `scale_factors`).
These are ggml's layouts (ggml-common.h's block_q8_0 ... block_q6_K); gguf.quants, an
independent implementation, is the tests' reference (tests/engine/test_gguf_blocks.py).
4-bit values (Q4_0, Q4_1, Q4_K) are marked `bits=4`, 5- and 6-bit ones (Q5_K, Q6_K)
`bits=6`: the native kernels keep them in as many bits (engine/device/native/ops.py
`packed`). The other types have no kernel, and are read
as float32 (engine/loader/gguf.py) and quantized as the engine's int8; `kept_or_reason`
says why, and `WeightFormats` keeps it for the log and /health.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import gguf
import numpy as np

from engine.device.integer_weight import Int8Weight

log = logging.getLogger("flint")

Q = gguf.GGMLQuantizationType


def _fp16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 at byte `start` of each block [..., blocks]: a group's own scale or offset,
    kept in its 2 bytes (the kernels widen it as they read it)."""
    return np.ascontiguousarray(blocks[..., start:start + 2]).view(np.float16)[..., 0]


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 at byte `start` of each block, as float32 [..., blocks]: a K-quant's d, whose
    products with 6- and 8-bit scales fit float32 and not fp16."""
    return _fp16(blocks, start).astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """Bytes [..., n] as 2n 4-bit values: the n low halves, then the n high halves."""
    return np.concatenate([packed & 15, packed >> 4], axis=-1)


# Each decoder gives a tensor's blocks [..., blocks, bytes] as (integers [..., blocks, per
# block], scales and offsets [..., blocks, groups a block] or None, and for a K-quant the
# factors [..., blocks] its 6- and 8-bit scales and offsets are integers of, else None).

def _q8_0(blocks):
    return blocks[..., 2:].view(np.int8), _fp16(blocks, 0), None, None, None


def _q4_0(blocks):
    return (_nibbles(blocks[..., 2:]).astype(np.int8) - 8), _fp16(blocks, 0), None, None, None


def _q4_1(blocks):
    return _nibbles(blocks[..., 4:]).astype(np.int8), _fp16(blocks, 0), _fp16(blocks, 2), None, None


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's and Q5_K's 12 bytes of 6-bit scales and mins [..., 12] as ([..., 8], [..., 8]):
    groups 0-3 in the low 6 bits of bytes 0-3 and 4-7; groups 4-7 in the halves of bytes
    8-11, their top two bits in the top bits of bytes 0-3 and 4-7."""
    low, high = packed[..., 0:4], packed[..., 4:8]
    last = packed[..., 8:12]
    scales = np.concatenate([low & 63, (last & 15) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([high & 63, (last >> 4) | ((high >> 6) << 4)], axis=-1)
    return scales.astype(np.float32), mins.astype(np.float32)


def _k_groups(blocks, quants: np.ndarray):
    """A K-quant's [..., 256] integers with its groups' scale d x sc and min -dmin x m, and
    their factors d and -dmin."""
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    sc, m = _k_scales(blocks[..., 4:16])
    return quants, d[..., None] * sc, -(dmin[..., None] * m), d, -dmin


def _by_chunks(packed: np.ndarray) -> np.ndarray:
    """Q4_K's and Q5_K's 128 bytes of nibbles [..., 128] as [..., 256]: 4 chunks of 32 bytes,
    each the low halves (inputs 64c + l) then the high ones (64c + 32 + l)."""
    chunks = packed.reshape(*packed.shape[:-1], 4, 32)
    return _nibbles(chunks).reshape(*packed.shape[:-1], 256)


def _q4_k(blocks):
    return _k_groups(blocks, _by_chunks(blocks[..., 16:144]).astype(np.int8))


def _q5_k(blocks):
    high = blocks[..., 16:48]  # bit 2c of byte l: input 64c + l's fifth bit; bit 2c + 1: 64c + 32 + l's
    bits = (high[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # [..., 8, 32]
    fifth = bits.reshape(*high.shape[:-1], 256)
    return _k_groups(blocks, (_by_chunks(blocks[..., 48:176]) | (fifth << 4)).astype(np.int8))


def _q6_k(blocks):
    low, high = blocks[..., 0:128], blocks[..., 128:192]
    scales = blocks[..., 192:208].view(np.int8).astype(np.float32)
    halves = []
    for half in range(2):  # 128 inputs each: 64 bytes of low nibbles, 32 of 2-bit pairs
        ql, qh = low[..., 64 * half:64 * half + 64], high[..., 32 * half:32 * half + 32]
        parts = [(ql[..., 0:32] & 15) | ((qh & 3) << 4), (ql[..., 32:64] & 15) | (((qh >> 2) & 3) << 4),
                 (ql[..., 0:32] >> 4) | (((qh >> 4) & 3) << 4), (ql[..., 32:64] >> 4) | (((qh >> 6) & 3) << 4)]
        halves.extend(parts)
    quants = np.concatenate(halves, axis=-1).astype(np.int8) - 32
    d = _half(blocks, 208)
    return quants, d[..., None] * scales, None, d, None


# Kept type -> (inputs a block, inputs a group, decoder of [..., blocks, bytes], the bits
# its values fit in: Int8Weight.bits).
KEPT = {
    Q.Q8_0: (32, 32, _q8_0, 8),
    Q.Q4_0: (32, 32, _q4_0, 4),
    Q.Q4_1: (32, 32, _q4_1, 4),
    Q.Q4_K: (256, 32, _q4_k, 4),
    Q.Q5_K: (256, 32, _q5_k, 6),  # 0..31: kept in 6 bits, as Q6_K's are
    Q.Q6_K: (256, 16, _q6_k, 6),
}


LAYER_BLOCKS = tuple(KEPT)
# The embedding and head: kept where their values have no offsets (Q8_0, Q6_K), the forms
# an embedding's rows are read from (engine/device/native/ops.py `packed_rows`).
HEAD_BLOCKS = (Q.Q8_0, Q.Q6_K)
KEPT_LAYER_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")  # their parts of the served projections


def kept_or_reason(tensor_type, blocks=LAYER_BLOCKS) -> str | None:
    """None where `tensor_type` is read as its blocks (one of `blocks`); else why not."""
    if tensor_type in blocks:
        return None
    name = getattr(tensor_type, "name", str(tensor_type))
    if tensor_type in KEPT:
        return f"{name}: an embedding and head keep only {', '.join(kind.name for kind in blocks)}, read as int8"
    return f"{name} has no native kernel (kept: {', '.join(kind.name for kind in blocks)}), read as int8"


@dataclass
class WeightFormats:
    """What a GGUF file's projections were read as: tensors by kept type, and each one read
    as float32 (then served as int8), with why. For the log, /health and /metrics."""

    kept: dict[str, int] = field(default_factory=dict)
    fell_back: dict[str, str] = field(default_factory=dict)  # tensor name -> reason

    def read(self, tensor: str, type_name: str, reason: str | None) -> None:
        if reason is None:
            self.kept[type_name] = self.kept.get(type_name, 0) + 1
        else:
            self.fell_back[tensor] = reason

    def log(self) -> None:
        for reason, tensors in self.by_reason().items():
            log.warning("%d GGUF tensors not read as their own blocks (%s): %s", len(tensors), reason,
                        ", ".join(tensors[:4]) + (", ..." if len(tensors) > 4 else ""))

    def by_reason(self) -> dict[str, list[str]]:
        reasons: dict[str, list[str]] = {}
        for tensor, reason in self.fell_back.items():
            reasons.setdefault(reason, []).append(tensor)
        return reasons

    def to_json(self) -> str:
        return json.dumps({"kept": self.kept, "fell_back": self.fell_back})

    @classmethod
    def from_json(cls, text: str) -> WeightFormats:
        values = json.loads(text)
        return cls(dict(values["kept"]), dict(values["fell_back"]))


def blocks_of(data: np.ndarray, tensor_type, shape: tuple[int, ...]) -> Int8Weight:
    """A tensor's raw bytes `data` (GGUFReader's, rows of blocks) of a kept type as an
    Int8Weight of `shape` [..., out, in] (NumPy)."""
    per_block, group, decode, bits = KEPT[tensor_type]
    block_bytes = gguf.GGML_QUANT_SIZES[tensor_type][1]
    *lead, width = shape
    blocks = np.ascontiguousarray(data).reshape(*lead, width // per_block, block_bytes)
    quants, scales, mins, scale_factors, min_factors = decode(blocks)
    values = np.ascontiguousarray(quants.reshape(*lead, width))
    by_row = lambda array, count: None if array is None else np.ascontiguousarray(array.reshape(*lead, count))
    groups, supers = width // group, width // per_block
    return Int8Weight(values=values, scales=by_row(scales, groups), mins=by_row(mins, groups), bits=bits,
                      integer_dots=True, scale_factors=by_row(scale_factors, supers),
                      min_factors=by_row(min_factors, supers))

