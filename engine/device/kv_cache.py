"""The paged KV cache, in the layout the attention that reads it wants.

- `KVCache` (stacked): keys and values in two arrays, [layers, pages, page_size, kv_heads,
  head_dim]. The jnp reference and the Mosaic GPU kernel read it at a layer index, and a
  `lax.scan` over the layers carries it.
- `LayerKVCache` (per layer): one array per layer, [pages, page_size, 2 * kv_heads,
  head_dim], each head's key and value side by side (keys at even heads): what JAX's TPU
  kernel reads (engine/device/attention/ragged_tpu.py). Each layer's array is its own buffer, so
  the kernel reads it in place, where slicing a layer out of a stack would copy it; the
  layers are then unrolled (engine/models/llama.py), one static index each.

Both answer the model's three questions: `write` a step's keys and values, the `operands`
attention reads for a layer, and `copy_pages` (a beam's fork). Page 0 is the null page:
padding tokens write there and unused block-table entries point there, so every gather and
scatter stays in bounds without branches. The block manager never hands it out.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from engine.config import AUTO, FLOAT8_KV, FLOAT8_VALUES, INTEGER_QUANTIZATIONS, EngineConfig, ModelConfig
from engine.device.native import ops as native_ops
from engine.device.sharding import kv_cache_sharding, layer_kv_cache_sharding


@jax.tree_util.register_dataclass
@dataclass
class KVCache:
    k: jax.Array  # [layers, pages, page_size, kv_heads, head_dim]
    v: jax.Array  # [layers, pages, page_size, kv_heads, head_dim]

    @property
    def page_size(self) -> int:
        return self.k.shape[2]

    def write(self, layer, pages, offsets, k, v) -> KVCache:
        """The cache with keys and values [tokens, kv_heads, d] at (pages, offsets) of `layer`."""
        return KVCache(k=self.k.at[layer, pages, offsets].set(stored(k, self.k.dtype)),
                       v=self.v.at[layer, pages, offsets].set(stored(v, self.v.dtype)))

    def operands(self, layer):
        """(k_cache, v_cache, layer): what an attention implementation reads for `layer`."""
        return self.k, self.v, layer

    def copy_pages(self, sources, destinations) -> KVCache:
        def copy(pages):  # [layers, pages, page_size, kv_heads, head_dim]
            return pages.at[:, destinations].set(pages[:, sources])

        return KVCache(k=copy(self.k), v=copy(self.v))


@jax.tree_util.register_dataclass
@dataclass
class LayerKVCache:
    layers: tuple[jax.Array, ...]  # per layer: [pages, page_size, 2 * kv_heads, head_dim]

    @property
    def page_size(self) -> int:
        return self.layers[0].shape[1]

    def write(self, layer: int, pages, offsets, k, v) -> LayerKVCache:
        """As KVCache.write, at a static `layer`."""
        pages_of_layer = self.layers[layer]
        written = pages_of_layer.at[pages, offsets].set(stored(interleave(k, v), pages_of_layer.dtype))
        return LayerKVCache(layers=(*self.layers[:layer], written, *self.layers[layer + 1:]))

    def operands(self, layer: int):
        """(the layer's pages, None, 0): the interleaved pages hold both keys and values."""
        return self.layers[layer], None, 0

    def copy_pages(self, sources, destinations) -> LayerKVCache:
        return LayerKVCache(layers=tuple(pages.at[destinations].set(pages[sources]) for pages in self.layers))


def interleave(k, v):
    """Keys and values [..., kv_heads, d] as [..., 2 * kv_heads, d]: key h at 2h, its value at 2h + 1."""
    return jnp.stack([k, v], axis=-2).reshape(*k.shape[:-2], 2 * k.shape[-2], k.shape[-1])


# A float8_e4m3fn cache's arrays hold its values' bytes: XLA's CPU backend scatters no
# float8, and to write one token it widened the whole cache and narrowed it back (0.5 s a
# step). Bytes scatter in place; `stored` and `readable` convert what is written or read.
FLOAT8_BYTES = jnp.uint8


def storage_dtype(name: str):
    """The arrays' dtype for keys or values of dtype `name`."""
    return FLOAT8_BYTES if name == FLOAT8_KV else jnp.dtype(name)


def stored(x, storage):
    """Keys or values `x` as a cache of array dtype `storage` holds them. float8 saturates
    at its largest value (448): a cast of anything larger to float8_e4m3fn, which has no
    infinity, gives NaN."""
    if jnp.dtype(storage) != jnp.dtype(FLOAT8_BYTES):
        return x.astype(storage)
    largest = float(jnp.finfo(FLOAT8_KV).max)
    return jax.lax.bitcast_convert_type(jnp.clip(x, -largest, largest).astype(FLOAT8_KV), FLOAT8_BYTES)


def readable(x):
    """Cached keys or values in a dtype arithmetic takes: float8 bytes as bfloat16 (exactly:
    every float8_e4m3fn value is one); other dtypes as they are."""
    if jnp.dtype(x.dtype) != jnp.dtype(FLOAT8_BYTES):
        return x
    return jax.lax.bitcast_convert_type(x, FLOAT8_KV).astype(jnp.bfloat16)


def kv_cache_shape(model: ModelConfig, engine: EngineConfig) -> tuple[int, ...]:
    return (model.num_layers, engine.num_pages, engine.page_size, model.num_kv_heads, model.head_dim)


def kv_cache_dtype(engine: EngineConfig, native_cpu: bool) -> str:
    """The cache's dtype for `engine` (its dtype and quantization resolved): as asked, or for
    auto float8_values (keys in bfloat16, values in float8_e4m3fn) where the native CPU
    kernels serve int8 weights (their attention widens keys and values as it reads them:
    3 bytes a key and value where float32 takes 8, in the server's largest allocation; the
    quality gate scores it, tests/engine/test_quantization.py), else the compute dtype.
    Keys in float8 too fail the gate's decode case (perplexity 2.2% off): float8_e4m3fn is
    there to ask for."""
    if engine.kv_cache_dtype != AUTO:
        return engine.kv_cache_dtype
    native_int8 = native_cpu and engine.quantization in INTEGER_QUANTIZATIONS and engine.dtype == "float32"
    return FLOAT8_VALUES if native_int8 else engine.dtype


def cache_dtypes(name: str) -> tuple[str, str]:
    """The (keys, values) dtypes of a cache of dtype `name`."""
    return ("bfloat16", FLOAT8_KV) if name == FLOAT8_VALUES else (name, name)


def holds_float8(name: str) -> bool:
    return FLOAT8_KV in cache_dtypes(name)


def init_kv_cache(model: ModelConfig, engine: EngineConfig, mesh: Mesh, per_layer: bool = False,
                  dtype: str | None = None, native: bool = False):
    """A zeroed cache laid out across `mesh` (split along the KV heads where they divide):
    a KVCache, or a LayerKVCache when `per_layer`; of `dtype` (a KV_CACHE_DTYPES name; default:
    the compute dtype). `native` (the native CPU kernels serve, on one device): its pages
    take memory only once written (engine/device/native/zeros.cc), so an idle server does
    not hold a cache sized for every sequence at its longest."""
    keys, values = (storage_dtype(name) for name in cache_dtypes(dtype or engine.dtype))
    if per_layer:
        if keys != values:
            raise ValueError(f"a cache of one array per layer holds keys and values in one dtype, not {dtype}")
        layers, pages, page_size, kv_heads, head_dim = kv_cache_shape(model, engine)
        shape = (pages, page_size, 2 * kv_heads, head_dim)
        zeros = _zeros(shape, keys, layer_kv_cache_sharding(shape, mesh), native)
        return LayerKVCache(layers=tuple(zeros() for _ in range(layers)))
    shape = kv_cache_shape(model, engine)
    # One program per dtype: a second, identical one would be a second compile (or cache load).
    zeros = {dtype: _zeros(shape, dtype, kv_cache_sharding(shape, mesh), native) for dtype in {keys, values}}
    return KVCache(k=zeros[keys](), v=zeros[values]())


def _zeros(shape: tuple[int, ...], dtype, sharding: NamedSharding, native: bool):
    make = native_ops.zeros if native else jnp.zeros
    return jax.jit(lambda: make(shape, dtype), out_shardings=sharding)


COPY_BATCH = 32  # page copies per device call (a search of 31 beams forks at most 30 pages a step)


def copy_pages(kv_cache: KVCache | LayerKVCache, sources, destinations):
    """The cache with pages `sources` [n] copied onto `destinations` [n], every layer.
    Destinations are distinct (fresh pages) apart from padding, which copies page 0 onto itself."""
    return kv_cache.copy_pages(sources, destinations)
