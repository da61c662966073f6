"""Integer weights: a matrix as small integers and a scale (and offset) per group of inputs
(`Int8Weight`), the form of Flint's own int8 (engine/device/weights.py `quantize_int8`) and of
a GGUF file's blocks (engine/loader/gguf_blocks.py); new weights quantized into a served
form (`quantize_into`), weights of different forms made one (`alike`), and the matrix a
weight stands for (`dequantize`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.fp8 import Fp8Weight, widened_groups


@jax.tree_util.register_dataclass
@dataclass
class Int8Weight:
    """A matrix [..., out, in] as small integers and a scale per group of inputs:
    weight = value x scale (+ min, where a GGUF block format has offsets:
    engine/loader/gguf_blocks.py). `bits` 4 or 6: the values fit in that many bits (-8..7
    or -32..31 without offsets, 0..15 or 0..63 with them), which the native kernels keep in
    as many bits (engine/device/native/ops.py `packed`). `integer_dots`: a
    GGUF file's blocks, which the native kernels multiply as ggml does where the CPU has
    integer dot products: over the inputs quantized to int8 per group (dot.cc)."""

    values: jax.Array  # int8 [..., out, in]
    # float32 [..., out, in // group]; float16 where a GGUF format's scales are fp16 (Q8_0,
    # Q4_0, Q4_1), kept exactly in half the bytes. Offsets in the scales' dtype.
    scales: jax.Array
    mins: jax.Array | None = None  # [..., out, in // group], or None
    bits: int = field(default=8, metadata=dict(static=True))
    integer_dots: bool = field(default=False, metadata=dict(static=True))
    # Where each scale (and offset) is an integer of int8's range times a factor of its
    # super-block of inputs (a K-quant's 6- and 8-bit scales under its fp16 d, dmin): the
    # factors, float32 [..., out, supers]. The native kernels read those integers and
    # factors in place of the float32 scales, a quarter of their bytes (`factored`).
    scale_factors: jax.Array | None = None
    min_factors: jax.Array | None = None  # where it has offsets and scale_factors

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape


def factored(scales, factors):
    """Scales (or offsets) [..., out, groups] as the integers [..., out, groups] (int8) they
    are of their super-blocks' `factors` [..., out, supers]: exact (Int8Weight)."""
    xp = np if isinstance(scales, np.ndarray) else jnp
    per_super = scales.shape[-1] // factors.shape[-1]
    safe = xp.where(factors == 0, 1, factors)  # a super-block of zeros: its integers 0
    return xp.rint(scales / xp.repeat(safe, per_super, axis=-1)).astype(xp.int8)


def unfactored(integers, factors):
    """The float32 scales (or offsets) `factored` took apart."""
    xp = np if isinstance(integers, np.ndarray) else jnp
    return integers.astype(xp.float32) * xp.repeat(factors, integers.shape[-1] // factors.shape[-1], axis=-1)


@partial(jax.jit, static_argnames=("bits", "groups", "offsets", "integer_dots", "scale_dtype", "supers"))
def quantize_into(matrix, bits: int, groups: int, offsets: bool, integer_dots: bool = False,
                  scale_dtype: str = "float32", supers: int = 0) -> Int8Weight:
    """`matrix` as an Int8Weight of a given form (a served GGUF weight's: new weights for a
    model served from its blocks, engine/device/weight_update.py): `groups` a row; with
    `offsets` each group from its least value in 2^bits - 1 steps (4 and 6 bits) or 127
    (int8), else symmetric: 2^(bits - 1) - 1 steps a side (the least value unused) or 127.
    Scales and offsets in `scale_dtype`, or where `supers` (a row's super-blocks) as int8
    integers of a factor each (a K-quant's form: the largest magnitude 127 steps), rounded
    so before the values are chosen under them."""
    width = matrix.shape[-1]
    grouped = matrix.astype(jnp.float32).reshape(*matrix.shape[:-1], groups, width // groups)
    factors = {}

    def kept(array, part: str):
        if not supers:
            return array.astype(scale_dtype)
        by_super = array.reshape(*array.shape[:-1], supers, groups // supers)
        factors[part] = jnp.max(jnp.abs(by_super), axis=-1) / 127.0
        return unfactored(factored(array, factors[part]), factors[part])

    if offsets:
        low, high = grouped.min(axis=-1), grouped.max(axis=-1)
        levels = 127 if bits == 8 else 2**bits - 1
        mins = kept(low, "mins")
        scales = kept((high - mins.astype(jnp.float32)) / levels, "scales")
        steps = grouped - mins.astype(jnp.float32)[..., None]
        values = jnp.clip(jnp.round(steps / _nonzero(scales)[..., None]), 0, levels)
    else:
        levels = 2 ** (bits - 1) - 1
        scales = kept(jnp.max(jnp.abs(grouped), axis=-1) / levels, "scales")
        values, mins = jnp.clip(jnp.round(grouped / _nonzero(scales)[..., None]), -levels, levels), None
    return Int8Weight(values=values.astype(jnp.int8).reshape(matrix.shape), scales=scales, mins=mins, bits=bits,
                      integer_dots=integer_dots, scale_factors=factors.get("scales"),
                      min_factors=factors.get("mins"))


def _nonzero(scales):
    """Scales as float32, 1 where 0 (a group of zeros: its values 0 under any scale)."""
    scales = scales.astype(jnp.float32)
    return jnp.where(scales > 0, scales, 1.0)


def dequantize(weight, dtype=jnp.float32) -> jax.Array:
    """The matrix a weight stands for, in `dtype` (a float weight is returned as it is)."""
    if not isinstance(weight, (Int8Weight, Fp8Weight)):
        return weight
    matrix = widened_groups(weight.values, weight.scales, dtype)
    if getattr(weight, "mins", None) is None:
        return matrix
    group = weight.values.shape[-1] // weight.mins.shape[-1]
    return matrix + jnp.repeat(jnp.asarray(weight.mins).astype(dtype), group, axis=-1)


# Int8Weights of different forms made one, so they concatenate (q|k|v, gate|up) or stack
# (over layers, where the native kernels do not read a stack per form: layer_forms.py): a
# GGUF Q4_K_M file holds Q4_K and Q6_K tensors side by side (attn_v and ffn_down in Q6_K in
# some layers), and a fused matrix is one form. A form is
# (bits, groups, offsets). The common one: the finest groups among them (a coarser group's
# scale repeated over its finer parts), offsets where any has them, the most bits among
# them; float16 scales only where all have them, else float32. A weight without offsets
# joins a form with them as its values from 0 (q + 2^(bits - 1), its offset -2^(bits - 1)
# x its scale) where the form is 4- or 6-bit, so a Q4_K and Q6_K stack is 6-bit; in an int8
# form its offsets are 0. Each weight stands for the same numbers after (each scale and
# offset exactly as it was, or a power of two times it).

def alike(weights: list) -> list:
    """`weights` in one form (see the module). Where some are plain arrays (a tensor of a
    type with no kernel, read as float32) they are all made plain arrays."""
    if not any(isinstance(weight, Int8Weight) for weight in weights):
        return weights
    if not all(isinstance(weight, Int8Weight) for weight in weights):
        return [_plain(weight) for weight in weights]
    groups = max(weight.scales.shape[-1] for weight in weights)
    offsets = any(weight.mins is not None for weight in weights)
    bits = max(weight.bits for weight in weights)
    dots = all(weight.integer_dots for weight in weights)
    scale_dtypes = {np.dtype(weight.scales.dtype) for weight in weights}
    scale_dtype = scale_dtypes.pop() if len(scale_dtypes) == 1 else np.dtype(np.float32)
    factors = _all_factored(weights)
    return [in_form(weight, groups, offsets, bits, dots, scale_dtype, factors) for weight in weights]


def _all_factored(weights: list) -> bool:
    """Whether every weight's scales (and offsets) have factors, over super-blocks alike."""
    supers = {None if weight.scale_factors is None else weight.scale_factors.shape[-1] for weight in weights}
    offsets_factored = all(weight.mins is None or weight.min_factors is not None for weight in weights)
    return None not in supers and len(supers) == 1 and offsets_factored


def in_form(weight: Int8Weight, groups: int, offsets: bool, bits: int, dots: bool,
            scale_dtype=np.float32, factors: bool = False) -> Int8Weight:
    """`weight` with `groups` groups a row (a multiple of its own), offsets where `offsets`,
    marked as `bits` (no fewer than its own) and as multiplied over integer inputs where
    `dots`, its scales and offsets in `scale_dtype` (float32, or its own float16), with
    their factors where `factors` (a K-quant's), else without."""
    xp = np if isinstance(weight.values, np.ndarray) else jnp
    factor = groups // weight.scales.shape[-1]
    if factor * weight.scales.shape[-1] != groups:
        raise ValueError(f"groups of {weight.scales.shape[-1]} and {groups} a row have no common refinement")
    finer = lambda array: _as_dtype(array if factor == 1 else xp.repeat(array, factor, axis=-1), scale_dtype)
    bits, values, scales = max(bits, weight.bits), weight.values, finer(weight.scales)
    scale_factors, min_factors = weight.scale_factors, weight.min_factors
    if weight.mins is not None or not offsets:
        mins = None if weight.mins is None else finer(weight.mins)
    elif bits == 8:
        mins, min_factors = xp.zeros_like(scales), scale_factors  # integers 0 of any factor
    else:  # from 0, in the form's bits: offsets -shift x the scales, the same integers of factors -shift x theirs
        shift = _as_dtype(xp.asarray(-(2 ** (weight.bits - 1))), scale_dtype)
        values = (values.astype(xp.int16) - shift.astype(xp.int16)).astype(xp.int8)
        mins = scales * shift
        min_factors = None if scale_factors is None else scale_factors * shift.astype(scale_factors.dtype)
    if not factors:
        scale_factors = min_factors = None
    return Int8Weight(values=values, scales=scales, mins=mins, bits=bits, integer_dots=dots,
                      scale_factors=scale_factors, min_factors=min_factors if mins is not None else None)


def _as_dtype(array, dtype):
    return array if array.dtype == dtype else array.astype(dtype)


def _plain(weight):
    if not isinstance(weight, Int8Weight):
        return weight
    return np.asarray(dequantize(weight)) if isinstance(weight.values, np.ndarray) else dequantize(weight)
