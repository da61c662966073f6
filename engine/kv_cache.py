"""The paged KV cache: one pytree of two arrays, [layers, pages, page_size, kv_heads, head_dim].

Page 0 is the null page: padding tokens write there and unused block-table entries point
there, so every gather and scatter stays in bounds without branches. The block manager
never hands it out.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from engine.config import EngineConfig, ModelConfig
from engine.sharding import kv_cache_sharding
from engine.weights import resolve_dtype


@jax.tree_util.register_dataclass
@dataclass
class KVCache:
    k: jax.Array  # [layers, pages, page_size, kv_heads, head_dim]
    v: jax.Array  # [layers, pages, page_size, kv_heads, head_dim]

    @property
    def page_size(self) -> int:
        return self.k.shape[2]


def kv_cache_shape(model: ModelConfig, engine: EngineConfig) -> tuple[int, ...]:
    return (model.num_layers, engine.num_pages, engine.page_size, model.num_kv_heads, model.head_dim)


def init_kv_cache(model: ModelConfig, engine: EngineConfig, mesh: Mesh) -> KVCache:
    """A zeroed cache laid out across `mesh` (split along the KV heads where they divide)."""
    shape = kv_cache_shape(model, engine)
    sharding = kv_cache_sharding(shape, mesh)
    zeros = jax.jit(lambda: jnp.zeros(shape, engine.dtype), out_shardings=sharding)
    return KVCache(k=zeros(), v=zeros())


def kv_cache_bytes(model: ModelConfig, engine: EngineConfig) -> int:
    """Bytes of K and V together, for sizing the cache to memory (before an Engine has
    resolved an "auto" dtype, too)."""
    num_elements = 1
    for size in kv_cache_shape(model, engine):
        num_elements *= size
    return 2 * num_elements * jnp.dtype(resolve_dtype(engine.dtype)).itemsize


COPY_BATCH = 32  # page copies per device call (a search of 31 beams forks at most 30 pages a step)


def copy_pages(kv_cache: KVCache, sources, destinations) -> KVCache:
    """The cache with pages `sources` [n] copied onto `destinations` [n], every layer.
    Destinations are distinct (fresh pages) apart from padding, which copies page 0 onto itself."""
    def copy(pages):  # [layers, pages, page_size, kv_heads, head_dim]
        return pages.at[:, destinations].set(pages[:, sources])

    return KVCache(k=copy(kv_cache.k), v=copy(kv_cache.v))
