"""Logical axis names to a device mesh: the one table that says how weights are split.

Model code names what each dimension means ("vocab", "heads", "kv_heads", "mlp"); only
this module knows that those dimensions are split across the tensor-parallel mesh axis.
A dimension that does not divide evenly over the mesh stays replicated, so any model runs
on any mesh (SmolLM2's 3 KV heads on 4 devices, say) at some cost in memory.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from engine.config import EngineConfig, ModelConfig
from engine.device.fp8 import Fp8Weight
from engine.device.integer_weight import Int8Weight
from engine.device.layer_forms import LayerForms, RowParts
from engine.device.weights import is_served_weight, served_axes
from engine.models.params import ParamSpec, param_specs

TENSOR_AXIS = "tp"

# Logical axis -> mesh axis. None: replicated.
LOGICAL_AXIS_RULES: dict[str | None, str | None] = {
    "vocab": TENSOR_AXIS,
    "heads": TENSOR_AXIS,
    "kv_heads": TENSOR_AXIS,
    "mlp": TENSOR_AXIS,
    # A mixture of experts splits its experts over the devices where their count divides
    # (expert parallelism), else each expert's hidden units: a mesh axis splits one dim.
    "experts": TENSOR_AXIS,
    "expert_mlp": TENSOR_AXIS,
    "embed": None,
    "layers": None,
    None: None,
}

# The KV cache [layers, pages, page_size, kv_heads, head_dim] splits along its heads.
KV_CACHE_AXES = ("layers", None, None, "kv_heads", None)
# One layer's interleaved pages (engine/device/kv_cache.py LayerKVCache): a device's share of the
# 2 x kv_heads heads is its own KV heads' keys and values.
LAYER_KV_CACHE_AXES = (None, None, "kv_heads", None)


def make_mesh(engine_config: EngineConfig) -> Mesh:
    """A one-axis tensor-parallel mesh over the first prod(mesh_shape) devices."""
    num_devices = int(np.prod(engine_config.mesh_shape))
    devices = jax.devices()
    if num_devices > len(devices):
        raise ValueError(f"a tensor-parallel size of {num_devices} needs {num_devices} devices, and JAX sees "
                         f"{len(devices)} ({jax.default_backend()})")
    return Mesh(np.array(devices[:num_devices]), (TENSOR_AXIS,))


def partition_spec(shape: tuple[int, ...], axes: tuple[str | None, ...], mesh: Mesh) -> PartitionSpec:
    """Map logical axes to mesh axes, replicating any dimension the mesh does not divide."""
    mesh_axes = []
    for size, axis in zip(shape, axes):
        mesh_axis = LOGICAL_AXIS_RULES[axis]
        divisible = mesh_axis is not None and size % mesh.shape[mesh_axis] == 0 and mesh_axis not in mesh_axes
        mesh_axes.append(mesh_axis if divisible else None)
    return PartitionSpec(*mesh_axes)


def param_shardings(config: ModelConfig, mesh: Mesh, params: dict) -> dict:
    """A NamedSharding for every weight in `params` (same pytree structure)."""
    specs = param_specs(config)

    def sharding_for(spec: ParamSpec, param=None):
        """An FP8 checkpoint's weight (engine/device/fp8.py) has its scales split as its values,
        and a GGUF file's blocks (an Int8Weight) its scales and offsets."""
        if isinstance(param, Fp8Weight):
            scales = NamedSharding(mesh, partition_spec(param.scales.shape, spec.axes, mesh))
            return Fp8Weight(sharding_for(spec), scales)
        if isinstance(param, LayerForms):  # each form's stack as the whole stack would be
            return param.with_stacks(sharding_for(spec, stack) for stack in param.stacks)
        if isinstance(param, RowParts):  # each part's rows as its own
            return RowParts(parts=tuple(sharding_for(dataclasses.replace(spec, shape=tuple(part.shape)), part)
                                        for part in param.parts))
        if isinstance(param, Int8Weight):  # a GGUF file's blocks: scales and offsets split as the values
            groups = lambda part: None if part is None else NamedSharding(mesh, partition_spec(part.shape, spec.axes,
                                                                                               mesh))
            return dataclasses.replace(param, values=sharding_for(spec), scales=groups(param.scales),
                                       mins=groups(param.mins), scale_factors=groups(param.scale_factors),
                                       min_factors=groups(param.min_factors))
        return NamedSharding(mesh, partition_spec(spec.shape, spec.axes, mesh))

    shardings = {name: sharding_for(specs[name], params[name]) for name in params
                 if name not in ("layers", "rope_freq_factors")}
    layers = params["layers"]
    shardings["layers"] = {name: sharding_for(specs["layers"][name], layers[name]) for name in layers}
    if "rope_freq_factors" in params:
        shardings["rope_freq_factors"] = NamedSharding(mesh, PartitionSpec())
    return shardings


def kv_cache_sharding(shape: tuple[int, ...], mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, partition_spec(shape, KV_CACHE_AXES, mesh))


def layer_kv_cache_sharding(shape: tuple[int, ...], mesh: Mesh) -> NamedSharding:
    """A layer's interleaved pages split by KV heads, where the mesh divides them (a
    device then holds whole key-value pairs: 2 x kv_heads / devices is even)."""
    pairs = shape[2] // 2
    divides = pairs % mesh.shape[TENSOR_AXIS] == 0
    return NamedSharding(mesh, partition_spec(shape, LAYER_KV_CACHE_AXES, mesh) if divides else PartitionSpec())


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def served_shardings(mesh: Mesh, weights: dict) -> dict:
    """A NamedSharding for every leaf of the served weights (engine/device/weights.py), by name.

    The fused q|k|v and gate|up matrices split along their output rows like their parts;
    an int8 weight's scales split like its values."""
    def sharding_for(path, leaf) -> NamedSharding:
        names = [key.key if hasattr(key, "key") else getattr(key, "name", None) for key in path]
        weight_name = [name for name in names if is_served_weight(name)][-1]
        axes = served_axes(weight_name)
        return NamedSharding(mesh, partition_spec(leaf.shape, axes, mesh))

    return jax.tree_util.tree_map_with_path(sharding_for, weights)
