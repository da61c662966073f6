"""Paged attention over ragged batches: one signature, an implementation per backend.

- `reference` (engine/device/attention/reference.py): plain jnp. The CPU path, and the definition
  every kernel is tested against.
- `mosaic_gpu` (engine/device/attention/mosaic_gpu.py): a Pallas Mosaic GPU kernel for Hopper.
  Asked for on a CPU it runs in GPU interpret mode: slow, for tests only.
- `native_cpu` (engine/device/attention/native_cpu.py): the reference with its decode rows read by
  the native CPU kernel (engine/device/native). CPUs only, plain attention in float32.
- `ragged_tpu` (engine/device/attention/ragged_tpu.py): JAX's own Pallas TPU kernel, over a cache
  kept as one interleaved array per layer (engine/device/kv_cache.py `LayerKVCache`). TPUs only:
  JAX's TPU interpret mode cannot run it.

`auto` takes the GPU kernel on a GPU when it serves the model's shape (`mosaic_gpu.supports`)
and passes its start-up check (engine/device/attention/probe.py), the TPU kernel on a TPU when it
serves the shape, the native CPU kernel where the engine runs the native kernels (`native`),
and the reference otherwise: a float32 run on a GPU keeps XLA's exact
arithmetic, which GPU-against-CPU parity checks rely on. The GPU kernel asked for by name
on a GPU must pass the same check, or the engine does not start.

Every implementation is called as
    attention(q, k, v, k_cache, v_cache, layer, batch, scale) -> [tokens, heads, d]
after the model has written the step's keys and values to the cache. The reference also
takes `window=` and `softcap=` (engine/device/attention/reference.py); a model that uses
them is served by the reference (`choose(..., plain=False)`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import jax
from jax.sharding import Mesh, PartitionSpec

from engine.config import ATTENTIONS
from engine.device.attention import native_cpu
from engine.device.attention.native_cpu import native_cpu_attention
from engine.device.attention.probe import DEFAULT_BUCKETS, kernel_problem
from engine.device.attention.reference import paged_attention as reference_attention
from engine.device.sharding import TENSOR_AXIS

IMPLEMENTATIONS = ATTENTIONS


def gpu_kernel():
    """engine/device/attention/mosaic_gpu.py, imported where it is used: importing Mosaic GPU
    takes a third of a second, which a CPU's start need not spend."""
    return importlib.import_module("engine.device.attention.mosaic_gpu")


def tpu_kernel():
    """engine/device/attention/ragged_tpu.py, imported where it is used, as the GPU kernel is:
    JAX's Pallas TPU kernel costs a CPU's start a tenth of a second."""
    return importlib.import_module("engine.device.attention.ragged_tpu")


AUTO, REFERENCE, MOSAIC_GPU, RAGGED_TPU, NATIVE_CPU = ATTENTIONS

Attention = Callable[..., jax.Array]
log = logging.getLogger("flint")


def resolve(name: str, dtype, head_dim: int, num_heads: int, num_kv_heads: int, page_size: int,
            native: bool = False) -> str:
    """The implementation `name` stands for on this backend: auto becomes one of the others.
    `native`: the engine runs the native CPU kernels (engine/device/native resolve)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {', '.join(IMPLEMENTATIONS)}, not {name!r}")
    if name == NATIVE_CPU and not (native and native_cpu.supports(dtype, head_dim, page_size)):
        raise ValueError("attention native_cpu needs the native CPU kernels (cpu_kernels auto or native, on a CPU "
                         "where they were built), float32, a head_dim of 32, 64, 128 or 256 and pages of at "
                         "most 256 tokens")
    if name != AUTO:
        return name
    shape = (dtype, head_dim, num_heads, num_kv_heads, page_size)
    if on_gpu() and gpu_kernel().supports(*shape):
        return MOSAIC_GPU
    if on_tpu() and tpu_kernel().supports(*shape):
        return RAGGED_TPU
    if native and native_cpu.supports(dtype, head_dim, page_size):
        return NATIVE_CPU
    return REFERENCE


def on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def on_tpu() -> bool:
    return jax.default_backend() == "tpu"


def reads_a_cache_per_layer(name: str) -> bool:
    """Whether implementation `name` reads a LayerKVCache (engine/device/kv_cache.py) rather than
    the stacked KVCache."""
    return name == RAGGED_TPU


class KernelUnavailable(RuntimeError):
    """The kernel asked for by name failed its start-up check on this machine."""


@dataclass(frozen=True)
class AttentionChoice:
    """The attention a runner serves with (`in_use`), from the `requested` flag; `fallback`:
    why the kernel `auto` chose gave way to the reference (None: it did not). /health and
    /metrics show it, so a GPU serving on the slow path is seen without reading the log."""
    requested: str
    in_use: str
    fallback: str | None = None


def choose(requested: str, dtype, head_dim: int, num_heads: int, num_kv_heads: int, page_size: int,
           buckets: tuple[tuple[int, int], ...] = DEFAULT_BUCKETS, plain: bool = True,
           native: bool = False, float8_cache: bool = False) -> AttentionChoice:
    """What `requested` stands for here, after the kernel's start-up check at the engine's
    `buckets` ((tokens, rows) of its smallest and largest). A model whose attention is not
    `plain` (a sliding window, soft-capped scores) gets the reference, which has both; a
    `float8_cache` is read by the reference or the native CPU kernel."""
    if float8_cache and requested in (MOSAIC_GPU, RAGGED_TPU):
        raise ValueError(f"attention {requested} reads no float8_e4m3fn KV cache: use another --kv-cache-dtype, "
                         "or attention auto or reference")
    if not plain:
        if requested in (MOSAIC_GPU, RAGGED_TPU, NATIVE_CPU):
            raise ValueError(f"attention {requested} has no sliding window or soft-capping, and this model uses "
                             "them: use auto or reference")
        resolve(requested, dtype, head_dim, num_heads, num_kv_heads, page_size)  # the name's check
        return AttentionChoice(requested, REFERENCE)
    shape = (dtype, head_dim, num_heads, num_kv_heads, page_size)
    name = resolve(requested, *shape, native=native)
    if float8_cache and name in (MOSAIC_GPU, RAGGED_TPU):
        return AttentionChoice(requested, REFERENCE, f"{name} reads no float8_e4m3fn KV cache")
    problem = start_up_problem(name, requested, *shape, buckets=buckets)
    if problem is None:
        return AttentionChoice(requested, name)
    if requested == MOSAIC_GPU:
        raise KernelUnavailable(f"attention mosaic_gpu was asked for, and the kernel failed its start-up check on "
                                f"this machine: {problem}")
    log.warning("the Mosaic GPU attention kernel failed its start-up check (%s): serving with the jnp "
                "reference attention instead", problem)
    return AttentionChoice(requested, REFERENCE, f"{name} failed its start-up check: {problem}")


def start_up_problem(name: str, requested: str, dtype, head_dim: int, num_heads: int, num_kv_heads: int,
                     page_size: int, buckets: tuple[tuple[int, int], ...] = DEFAULT_BUCKETS) -> str | None:
    """Why the kernel fails its start-up check on this machine (engine/device/attention/probe.py);
    None when it passes, or when there is nothing to check: the reference, or the kernel
    asked for by name off a GPU, where it runs in GPU interpret mode (for tests) and no
    compiler of this machine's is involved."""
    if name != MOSAIC_GPU or (requested != AUTO and not on_gpu()):
        return None
    return kernel_problem(attention_for(MOSAIC_GPU), reference_attention, num_heads, num_kv_heads, head_dim,
                          page_size, dtype, buckets)


def attention_for(name: str, mesh: Mesh | None = None, num_kv_heads: int = 1) -> Attention:
    """The attention function of a resolved implementation name, laid over `mesh`."""
    if name == REFERENCE:
        return reference_attention
    if name == NATIVE_CPU:
        return native_cpu_attention  # one device: the native kernels run on a one-device mesh
    if name == RAGGED_TPU:
        if not on_tpu():
            raise ValueError(f"attention {RAGGED_TPU} runs on TPUs only, and JAX sees {jax.default_backend()} "
                             "devices (jax's TPU interpret mode cannot run its kernel)")
        kernel = tpu_kernel().ragged_tpu_attention
    else:
        kernel = partial(kernel_attention, interpret=None if on_gpu() else interpret_params())
    if mesh is None or mesh.size == 1:
        return kernel
    return over_mesh(kernel, mesh, num_kv_heads, cache_rank=4 if reads_a_cache_per_layer(name) else 5)


def kernel_attention(q, k, v, k_cache, v_cache, layer, batch, scale, *, interpret=None):
    """The kernel behind the common signature: k and v are already in the cache."""
    del k, v
    return gpu_kernel().ragged_paged_attention(q, k_cache, v_cache, layer, batch.token_rows, batch.positions,
                                             batch.block_tables, scale, interpret=interpret)


def over_mesh(attention: Attention, mesh: Mesh, num_kv_heads: int, cache_rank: int = 5) -> Attention:
    """`attention` once per device on its own heads (a Pallas call is not partitioned by XLA).

    The KV heads split over the tensor-parallel axis as engine/device/sharding.py splits the cache
    (its axis before head_dim: a `cache_rank`-dimensional array; a LayerKVCache's has no
    `v_cache`), and each device's query heads are the groups of its KV heads. With KV heads
    that do not divide, everything is replicated and so is the work."""
    split = num_kv_heads % mesh.shape[TENSOR_AXIS] == 0
    heads = PartitionSpec(None, TENSOR_AXIS, None) if split else PartitionSpec()
    cache = PartitionSpec(*[None] * (cache_rank - 2), TENSOR_AXIS, None) if split else PartitionSpec()

    def attend(q, k, v, k_cache, v_cache, layer, batch, scale):
        caches = (k_cache,) if v_cache is None else (k_cache, v_cache)

        def on_device(q, k, v, caches, layer, batch):
            return attention(q, k, v, caches[0], caches[1] if len(caches) > 1 else None, layer, batch, scale)

        per_device = jax.shard_map(
            on_device, mesh=mesh, in_specs=(heads, heads, heads, (cache,) * len(caches), PartitionSpec(),
                                            PartitionSpec()),
            out_specs=heads, check_vma=False)
        return per_device(q, k, v, caches, layer, batch)

    return attend


def interpret_params():
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # no public path in jax 0.10

    return InterpretGPUParams()
