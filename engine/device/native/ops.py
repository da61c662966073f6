"""The native kernels as JAX operations (jax.ffi calls of the targets linear.cc and attention.cc define).

- `linear`: x [tokens, in] (float32) times a `NativeWeight`: int8 with group scales, or
  bfloat16, of a stack of layers read at a traced `layer` in place. A scan over the layers
  passes the whole stack and the index, where slicing a layer out would copy it.
- `decode_attention`: each token's softmax state over its cached keys, read page by page
  where they lie (engine/device/attention/native_cpu.py: all of them, the step's included).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.device.weights import Int8Weight

BLOCK = 32  # inputs a step of the kernel's sums folds (blocks.h): widths and groups are multiples
ROW_TILE = 4  # output rows per register tile


@jax.tree_util.register_dataclass
@dataclass
class NativeWeight:
    """A matrix [out, in] of a stack [layers, out, in] the kernel reads at `layer`."""

    values: jax.Array  # int8 or bfloat16 [layers, out, in]
    scales: jax.Array | None  # float32 [layers, out, in // group] for int8; None for bfloat16
    layer: jax.Array  # int32 []

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape[-2:]


def serves(weight) -> bool:
    """Whether the linear kernel serves `weight` (an Int8Weight or array, stacked over
    layers): whole register tiles of rows and SIMD widths of inputs and groups."""
    if isinstance(weight, Int8Weight):
        out, width = weight.values.shape[-2:]
        group = width // weight.scales.shape[-1]
        return out % ROW_TILE == 0 and width % BLOCK == 0 and group % BLOCK == 0
    out, width = weight.shape[-2:]
    return weight.dtype == jnp.bfloat16 and out % ROW_TILE == 0 and width % BLOCK == 0


def at_layer(weight, layer) -> NativeWeight:
    """`weight` (stacked, served by the kernel) read at `layer`; a matrix is a stack of one."""
    layer = jnp.asarray(layer, jnp.int32)
    if isinstance(weight, Int8Weight):
        return NativeWeight(values=weight.values, scales=weight.scales, layer=layer)
    return NativeWeight(values=weight, scales=None, layer=layer)


def registered() -> None:
    """The kernels' targets registered with XLA (once), before a program names one."""
    from engine.device import native

    if not native.available():
        raise RuntimeError("Flint's native CPU kernels are not built here (engine/device/native)")


def linear(x, weight: NativeWeight):
    """x [tokens, in], rounded to bfloat16, times the weight's matrix in float32 [tokens,
    out], at every count of tokens (blocks.h): each output is summed in one order, so a
    row's product is the same bits whatever shares the call. In pairs of bfloat16 where
    the CPU has AVX512_BF16, an int8 weight times its group's scale rounded to bfloat16 too
    (`products_in_pairs`)."""
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


def zeros(shape: tuple[int, ...], dtype) -> jax.Array:
    """jnp.zeros(shape, dtype), whose memory the CPU holds only where it is later written
    (zeros.cc): the KV cache's start."""
    registered()
    return jax.ffi.ffi_call("flint_zeros", jax.ShapeDtypeStruct(shape, dtype))()
