"""The native kernels as JAX operations (jax.ffi calls of the targets linear.cc and attention.cc define).

- `linear`: x [tokens, in] (float32) times a `NativeWeight`: int8 with group scales, or
  bfloat16, of a stack of layers read at a traced `layer` in place. A scan over the layers
  passes the whole stack and the index, where slicing a layer out would copy it.
- `decode_attention`: each token's softmax state over its cached keys, read page by page
  where they lie (engine/device/attention/native_cpu.py merges it with the step's keys);
- `step_attention`: each token's softmax state over the step's own keys of its row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from engine.device.weights import Int8Weight

LANES = 16  # the widest SIMD the library may be built for: every vectorized width is a multiple
ROW_TILE = 4  # output rows per register tile
# The most tokens a layer's product goes through the kernel for where its products of many
# tokens run in float32 (a CPU without AVX512_BF16). Up to 16 it is bound by reading the
# weights, which the kernel does in place and at the memory's rate; at 32 (a step of 32
# decodes) its tokens-across-the-lanes tiles match XLA's matmul and save the widening XLA
# does first (a 32-row step of SmolLM2 97-101 -> 91 ms); from 64 XLA's blocked matmul on the
# widened layer is faster. In pairs of bfloat16 the kernel is faster at every count
# (BENCHMARKS.md, issue 27), and takes them all.
MOST_TOKENS = 32


@jax.tree_util.register_dataclass
@dataclass
class NativeWeight:
    """A matrix [out, in] of a stack [layers, out, in] the kernel reads at `layer`."""

    values: jax.Array  # int8 or bfloat16 [layers, out, in]
    scales: jax.Array | None  # float32 [layers, out, in // group] for int8; None for bfloat16
    layer: jax.Array  # int32 []
    # Through the kernel at any count of tokens (the head): XLA would widen all of it first,
    # every step. A layer's matrix goes to XLA's blocked matmul past MOST_TOKENS.
    every_count: bool = field(default=False, metadata={"static": True})

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape[-2:]


def serves(weight) -> bool:
    """Whether the linear kernel serves `weight` (an Int8Weight or array, stacked over
    layers): whole register tiles of rows and SIMD widths of inputs and groups."""
    if isinstance(weight, Int8Weight):
        out, width = weight.values.shape[-2:]
        group = width // weight.scales.shape[-1]
        return out % ROW_TILE == 0 and width % LANES == 0 and group % LANES == 0
    out, width = weight.shape[-2:]
    return weight.dtype == jnp.bfloat16 and out % ROW_TILE == 0 and width % LANES == 0


def at_layer(weight, layer, every_count: bool = False) -> NativeWeight:
    """`weight` (stacked, served by the kernel) read at `layer`; a matrix is a stack of one.
    `every_count`: through the kernel whatever the tokens (NativeWeight.every_count)."""
    layer = jnp.asarray(layer, jnp.int32)
    if isinstance(weight, Int8Weight):
        return NativeWeight(values=weight.values, scales=weight.scales, layer=layer, every_count=every_count)
    return NativeWeight(values=weight, scales=None, layer=layer, every_count=every_count)


def takes(tokens: int, weight: NativeWeight) -> bool:
    """Whether a product of `tokens` rows goes through the kernel: int8 up to MOST_TOKENS,
    or at every count where the build has products in pairs of bfloat16; a bfloat16 weight
    and the head always, as XLA would first widen all of it to float32."""
    from engine.device import native

    return (weight.every_count or weight.scales is None or tokens <= MOST_TOKENS
            or native.products_in_pairs())


def rounded_inputs(x):
    """x rounded to bfloat16, kept in its dtype: what the kernel's products take, for the
    products XLA runs instead (`takes` false), so that a row's product does not depend on the
    count of tokens that decides which. (reduce_precision: a convert there and back may be
    dropped by XLA, which allows excess precision.)"""
    return jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)


def sliced(weight: NativeWeight) -> Int8Weight:
    """The int8 layer's matrix out of the stack, for XLA (a bfloat16 weight never leaves the
    kernel: `takes`)."""
    return Int8Weight(values=weight.values[weight.layer], scales=weight.scales[weight.layer])


def registered() -> None:
    """The kernels' targets registered with XLA (once), before a program names one."""
    from engine.device import native

    if not native.available():
        raise RuntimeError("Flint's native CPU kernels are not built here (engine/device/native)")


def linear(x, weight: NativeWeight):
    """x [tokens, in], rounded to bfloat16, times the weight's matrix, exactly, in float32
    [tokens, out]. The kernel's products of many tokens take pairs of bfloat16 inputs
    (lanes_bf16.h: twice float32's products an instruction); every count of tokens takes
    them so, and a row's product does not depend on what shares the call."""
    registered()
    out = jax.ShapeDtypeStruct((x.shape[0], weight.shape[0]), jnp.float32)
    x = x.astype(jnp.bfloat16)
    if weight.scales is None:
        return jax.ffi.ffi_call("flint_linear_bf16", out)(x, weight.values, weight.layer)
    return jax.ffi.ffi_call("flint_linear_int8", out)(x, weight.values, weight.scales, weight.layer)


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


def step_attention(q, k, v, positions, token_rows):
    """Softmax state (max, normaliser, weighted values) of queries q [t, kv, group, d],
    already scaled, over the step's own keys k and values v [t, kv, d]: each token's row's
    tokens at positions up to its own (a row's tokens lie in one run of consecutive
    positions, as the runner packs them)."""
    registered()
    stats = jax.ShapeDtypeStruct(q.shape[:3], jnp.float32)
    weighted = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    return jax.ffi.ffi_call("flint_step_attention", (stats, stats, weighted))(
        q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32), positions.astype(jnp.int32),
        token_rows.astype(jnp.int32))


def zeros(shape: tuple[int, ...], dtype) -> jax.Array:
    """jnp.zeros(shape, dtype), whose memory the CPU holds only where it is later written
    (zeros.cc): the KV cache's start."""
    registered()
    return jax.ffi.ffi_call("flint_zeros", jax.ShapeDtypeStruct(shape, dtype))()
