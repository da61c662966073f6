"""The native kernels as JAX operations (jax.ffi calls of the targets linear.cc and attention.cc define).

- `linear`: x [tokens, in] (float32) times a `NativeWeight`: int8 with group scales, or
  bfloat16, of a stack of layers read at a traced `layer` in place. A scan over the layers
  passes the whole stack and the index, where slicing a layer out would copy it. The
  kernel reads a weight packed at load in blocks of rows (`packed`, blocks.h).
- `decode_attention`: each token's softmax state over its cached keys, read page by page
  where they lie (engine/device/attention/native_cpu.py: all of them, the step's included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from engine.device import native
from engine.device.integer_weight import Int8Weight, factored, unfactored
from engine.device.native.small_values import SMALL_BITS


@jax.tree_util.register_dataclass
@dataclass
class PackedWeight:
    """A matrix [..., out, in] packed as the kernel reads it (blocks.h): blocks of `rows`
    output rows, each holding, step by step of `step` inputs, its rows' weights side by
    side; integers with a scale (and offset, `mins`) per group of inputs (an
    Int8Weight's: float32, or a GGUF format's own fp16), or bfloat16.

    values: [..., out / rows, in / step, rows x step] (int8 or bfloat16), or for `bits` 4
    half that last dimension in bytes, two values a byte (`nibbles`), for `bits` 6 three
    quarters (`six_bits`); scales and mins:
    [..., out / rows, groups, rows], or None. (rows, step) is the build's
    `native.block_shape()`."""

    values: jax.Array
    scales: jax.Array | None
    mins: jax.Array | None = None
    bits: int = field(default=8, metadata=dict(static=True))
    dots: bool = field(default=False, metadata=dict(static=True))  # in the integer dot products' layout (dot.cc)
    # A K-quant's: its scales and offsets above as int8 integers of these float32 factors,
    # one a super-block of inputs, [..., out / rows, supers, rows] (Int8Weight's).
    scale_factors: jax.Array | None = None
    min_factors: jax.Array | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The matrix's own shape, [..., out, in]."""
        rows, step = DOT_BLOCK if self.dots else native.block_shape()
        return (*self.values.shape[:-3], self.values.shape[-3] * rows, self.values.shape[-2] * step)


@jax.tree_util.register_dataclass
@dataclass
class NativeWeight:
    """A packed matrix of a stack [layers, ...] the kernel reads at `layer`."""

    values: jax.Array  # int8, uint8 (4- or 6-bit) or bfloat16 [layers, out / rows, in / step, block]
    scales: jax.Array | None  # float32 or float16 [layers, out / rows, groups, rows]; None for bfloat16
    layer: jax.Array  # int32 [], or [2]: the layer and how many of x's rows are live (`at_layer`)
    mins: jax.Array | None = None  # as scales (their dtype), where the weight has offsets
    bits: int = field(default=8, metadata=dict(static=True))
    dots: bool = field(default=False, metadata=dict(static=True))
    scale_factors: jax.Array | None = None  # a K-quant's (PackedWeight's)
    min_factors: jax.Array | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return PackedWeight(self.values, self.scales, dots=self.dots).shape[-2:]


def serves(weight) -> bool:
    """Whether the linear kernel serves `weight` (an Int8Weight, a bfloat16 array or a
    PackedWeight, stacked over layers): whole blocks of rows, and whole steps of inputs in
    its width and groups. Nothing where the library is not built."""
    if isinstance(weight, PackedWeight):
        return True
    if not native.available():
        return False
    rows, step = native.block_shape()
    out, width = weight.shape[-2:]
    if over_integer_inputs(weight):
        rows, step = DOT_BLOCK[0], 2 * DOT_BLOCK[1]  # steps in pairs
    if isinstance(weight, Int8Weight):
        group = width // weight.scales.shape[-1]
        return out % rows == 0 and width % step == 0 and group % step == 0
    return weight.dtype == jnp.bfloat16 and out % rows == 0 and width % step == 0


DOT_BLOCK = (16, 4)  # rows a block, inputs a step, of the integer dot products (dot.cc)


DOT_GROUPS = (16, 32)  # the groups of inputs the integer dot products take (dot.cc): GGUF's blocks'


def over_integer_inputs(weight) -> bool:
    """Whether the kernels multiply `weight` over integer inputs (dot.cc): a GGUF file's
    blocks, where the build has integer dot products."""
    if not (isinstance(weight, Int8Weight) and weight.integer_dots and native.integer_dots()):
        return False
    return weight.values.shape[-1] // weight.scales.shape[-1] in DOT_GROUPS


def packed(weight) -> PackedWeight:
    """`weight` (an Int8Weight or a bfloat16 array [..., out, in] the kernel serves, of
    jax or NumPy arrays) packed in the build's blocks; a GGUF file's blocks in the integer
    dot products' where the build has them (dot.cc: steps of 4 inputs of 16 rows, 64
    values; 4-bit values two steps to 64 bytes, the first step in their low halves and the
    second in their high halves, `nibbles`' unit of two steps)."""
    dots = over_integer_inputs(weight)
    rows, step = DOT_BLOCK if dots else native.block_shape()
    values = weight.values if isinstance(weight, Int8Weight) else weight
    *lead, out, width = values.shape
    values = steps_of_rows(values, rows, step).reshape(*lead, out // rows, width // step, rows * step)
    if not isinstance(weight, Int8Weight):
        return PackedWeight(values=values, scales=None)
    if weight.bits in SMALL_BITS:
        values = SMALL_BITS[weight.bits][0](values, signed=weight.mins is None, steps=2 if dots else 1)
    scales, mins = weight.scales, weight.mins
    if weight.scale_factors is not None:  # the integers, read with their factors
        scales = factored(scales, weight.scale_factors)
        mins = None if mins is None else factored(mins, weight.min_factors)
    by_block = lambda groups: groups_by_block(groups, rows)
    return PackedWeight(values=values, scales=by_block(scales), mins=by_block(mins), bits=weight.bits, dots=dots,
                        scale_factors=by_block(weight.scale_factors), min_factors=by_block(weight.min_factors))


def groups_by_block(groups, rows: int):
    """A weight's scales or offsets [..., out, groups] as the kernels read them: [..., out /
    rows, groups, rows]."""
    if groups is None:
        return None
    *lead, out, count = groups.shape
    return groups.reshape(*lead, out // rows, rows, count).swapaxes(-2, -1)


def steps_of_rows(values, rows: int, step: int):
    """values [..., out, in] as [..., out / rows, in / step, rows, step]. A NumPy array's
    step of inputs is moved as one wider element (a pair of int8 as a uint16): element by
    element, NumPy moved 0.26 GB/s, 0.5 s of a start."""
    *lead, out, width = values.shape
    if isinstance(values, np.ndarray) and step > 1:
        unit = np.dtype(f"u{values.dtype.itemsize * step}")
        wide = np.ascontiguousarray(values).view(unit).reshape(*lead, out // rows, rows, width // step)
        return np.ascontiguousarray(wide.swapaxes(-2, -1)).view(values.dtype).reshape(
            *lead, out // rows, width // step, rows, step)
    return values.reshape(*lead, out // rows, rows, width // step, step).swapaxes(-3, -2)


def unpacked(weight: PackedWeight):
    """The Int8Weight or bfloat16 array [..., out, in] that `packed` packed."""
    rows, step = DOT_BLOCK if weight.dots else native.block_shape()
    values = (weight.values if weight.bits == 8 else
              SMALL_BITS[weight.bits][1](weight.values, signed=weight.mins is None, steps=2 if weight.dots else 1))
    *lead, blocks, steps, _ = values.shape
    values = values.reshape(*lead, blocks, steps, rows, step).swapaxes(-3, -2)
    values = values.reshape(*lead, blocks * rows, steps * step)
    if weight.scales is None:
        return values
    by_row = lambda groups: None if groups is None else groups.swapaxes(-2, -1).reshape(*lead, blocks * rows, -1)
    scales, mins = by_row(weight.scales), by_row(weight.mins)
    scale_factors, min_factors = by_row(weight.scale_factors), by_row(weight.min_factors)
    if scale_factors is not None:
        scales = unfactored(scales, scale_factors)
        mins = None if mins is None else unfactored(mins, min_factors)
    return Int8Weight(values=values, scales=scales, mins=mins, bits=weight.bits, integer_dots=weight.dots,
                      scale_factors=scale_factors, min_factors=min_factors)


def unpacked_tree(weights):
    """`weights` (a pytree) with every PackedWeight as the Int8Weight or array it packs: the
    weights a served cache kept packed, for an engine that does not use the kernels."""
    is_packed = lambda node: isinstance(node, PackedWeight)
    return jax.tree.map(lambda node: unpacked(node) if is_packed(node) else node, weights, is_leaf=is_packed)


def packed_rows(weight: PackedWeight, ids) -> Int8Weight:
    """Rows `ids` [t] of a packed matrix without offsets (an embedding's lookup of a head:
    int8, or a GGUF Q6_K head's 6-bit values with factored scales), as an Int8Weight [t,
    in]. (A head of 4-bit values or offsets is never packed: llama.py.)"""
    assert weight.mins is None, "a packed head has no offsets"
    rows, step = DOT_BLOCK if weight.dots else native.block_shape()
    blocks, lanes = ids // rows, ids % rows
    if weight.bits == 8:
        values = weight.values.reshape(*weight.values.shape[:-1], rows, step)[blocks, :, lanes]  # [t, steps, step]
    else:  # each id's whole block of rows widened, its own lane then taken
        widened = SMALL_BITS[weight.bits][1](weight.values[blocks], signed=True, steps=2 if weight.dots else 1)
        values = widened.reshape(*widened.shape[:-1], rows, step)[jnp.arange(ids.shape[0]), :, lanes]
    scales = weight.scales[blocks, :, lanes]
    if weight.scale_factors is not None:
        scales = unfactored(scales, weight.scale_factors[blocks, :, lanes])
    return Int8Weight(values=values.reshape(ids.shape[0], -1), scales=scales)


def at_layer(weight: PackedWeight, layer, live=None) -> NativeWeight:
    """A packed stack's layer `layer` (traced, or 0 for a matrix, a stack of one). Where
    `live` (traced) is given, only the first `live` rows of each x it multiplies are
    computed (a step's real tokens: a bucket's padding follows them), the rest given zeros
    (shapes.h `live_rows`): a prompt of 129 tokens in the 256-token bucket no longer pays
    for 256."""
    where = jnp.asarray(layer, jnp.int32) if live is None else jnp.stack([jnp.asarray(layer, jnp.int32),
                                                                           jnp.asarray(live, jnp.int32)])
    return NativeWeight(values=weight.values, scales=weight.scales, layer=where,
                        mins=weight.mins, bits=weight.bits, dots=weight.dots, scale_factors=weight.scale_factors,
                        min_factors=weight.min_factors)


def registered() -> None:
    """The kernels' targets registered with XLA (once), before a program names one."""
    from engine.device import native

    if not native.available():
        raise RuntimeError("Flint's native CPU kernels are not built here (engine/device/native)")


def linear(x, weight: NativeWeight):
    """x [tokens, in], rounded to bfloat16, times the weight's matrix in float32 [tokens,
    out], at every count of tokens (blocks.h): each output is summed in one order, so a
    row's product is the same bits whatever shares the call. In pairs of bfloat16 where
    the CPU has AVX512_BF16 (`products_in_pairs`); an integer weight's groups are summed
    unscaled, each then scaled into its row's sum, and its offset times the group's inputs'
    sum added where it has offsets."""
    registered()
    out = jax.ShapeDtypeStruct((x.shape[0], weight.shape[0]), jnp.float32)
    x = x.astype(jnp.bfloat16)
    if weight.scales is None:
        return jax.ffi.ffi_call("flint_linear_bf16", out)(x, weight.values, weight.layer)
    kind = "dot" if weight.dots else "linear"  # a GGUF file's blocks over int8 inputs (dot.cc), or bfloat16 ones
    values = "int8" if weight.bits == 8 else f"{'s' if weight.mins is None else 'u'}{weight.bits}"
    suffix = ("_mins" if weight.mins is not None else "") + ("_factored" if weight.scale_factors is not None else "")
    # In the handlers' order (shapes.h FLINT_GROUPED_HANDLER): each part the weight has.
    parts = [part for part in (weight.scales, weight.scale_factors, weight.mins, weight.min_factors)
             if part is not None]
    return jax.ffi.ffi_call(f"flint_{kind}_{values}{suffix}", out)(x, weight.values, *parts, weight.layer)


# The (keys, values) cache array dtypes the attention kernel reads (attention.cc
# DecodeAttention); uint8: float8_e4m3fn's bytes (engine/device/kv_cache.py FLOAT8_BYTES).
DECODE_ATTENTION_CACHES = {("float32", "float32"), ("bfloat16", "bfloat16"), ("uint8", "uint8"), ("bfloat16", "uint8")}


def decode_attention(q, k_cache, v_cache, layer, tables, context_lens):
    """Softmax state (max, normaliser, weighted values) of queries q [t, kv, group, d],
    already scaled, over each token's first `context_lens` [t] cached keys, whose pages are
    `tables` [t, pages]; k_cache, v_cache: [layers, pages, page_size, kv, d], float32,
    bfloat16 or float8_e4m3fn's bytes, in a pair of DECODE_ATTENTION_CACHES (widened as the
    kernel reads them, in place)."""
    registered()
    stats = jax.ShapeDtypeStruct(q.shape[:3], jnp.float32)
    weighted = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    dtypes = (jnp.dtype(k_cache.dtype).name, jnp.dtype(v_cache.dtype).name)
    if dtypes not in DECODE_ATTENTION_CACHES:
        raise ValueError(f"the native decode attention reads no cache of (keys, values) {dtypes}")
    return jax.ffi.ffi_call("flint_decode_attention", (stats, stats, weighted))(
        q.astype(jnp.float32), k_cache, v_cache, jnp.asarray(layer, jnp.int32), tables.astype(jnp.int32),
        context_lens.astype(jnp.int32))


def zeros(shape: tuple[int, ...], dtype) -> jax.Array:
    """jnp.zeros(shape, dtype), whose memory the CPU holds only where it is later written
    (zeros.cc): the KV cache's start."""
    registered()
    return jax.ffi.ffi_call("flint_zeros", jax.ShapeDtypeStruct(shape, dtype))()
