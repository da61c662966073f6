"""LoRA on the device: adapter slots beside the base weights, and the batched product.

The served layers gain, for each fused projection an adapter may touch (`GROUPS`), the A
matrices of every slot side by side and one B per adapted projection:
- `lora_a_<group>` [layers, in, modules x slots x rank]: one product of the projection's
  input with the A of every slot and every adapted module of the group at once;
- `lora_b_<group>_<module>` [layers, slots x rank, out]: B, times the adapter's scale.

A step's rows each name a slot (-1: the base alone). Each token's A products are masked
to its row's slot (a one-hot over the slots), so the B product sums only its adapter's
rank: a batch mixes adapters and the base in one step, at the cost of
slots x rank columns per projection, whatever the rows ask. Slots are written between
steps (`write_slot`), so loading an adapter compiles nothing. A slot never written, or
cleared, is zeros and adds nothing.

With no slots (EngineConfig.max_loras 0) the layers have no LoRA weights and the step is
compiled exactly as without LoRA. Under the native CPU kernels the slots are laid out as the
kernel reads a weight, and both products go through it (engine/device/lora_native.py), so
that an adapted row's result does not depend on what shares its step.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from engine.config import EngineConfig, ModelConfig
from engine.device import lora_native
from engine.device.native import ops as native_ops
from engine.device.integer_weight import Int8Weight
from engine.loader.lora import LoraAdapter, projection_shapes

# A fused served projection (engine/device/weights.py FUSED) -> its PEFT modules, in the
# order of its output columns.
GROUPS = {
    "wqkv": ("q_proj", "k_proj", "v_proj"),
    "wo": ("o_proj",),
    "w_gate_up": ("gate_proj", "up_proj"),
    "w_down": ("down_proj",),
}
PREFIX = "lora_"


def adapted_modules(group: str, engine: EngineConfig, model: ModelConfig) -> tuple[str, ...]:
    """The modules of `group` that slots adapt: the configured targets, less a mixture of
    experts' MLP (its experts have no single projection to adapt)."""
    dense_mlp = not model.num_experts
    return tuple(module for module in GROUPS[group] if module in engine.lora_targets
                 and (dense_mlp or group in ("wqkv", "wo")))


def adapted_groups(engine: EngineConfig, model: ModelConfig) -> dict[str, tuple[str, ...]]:
    return {group: adapted_modules(group, engine, model) for group in GROUPS}


def native_slots(model: ModelConfig, engine: EngineConfig, native_linear: bool, layers: dict) -> bool:
    """Whether the slots are laid out for the native kernels: where the projections they
    adapt go through them (int8, under `native_linear`: engine/models/layers.py
    native_layer_weights), and the kernel serves the slots' shapes. A float model's slots
    stay in its own precision, beside its XLA products."""
    groups = {group: modules for group, modules in adapted_groups(engine, model).items() if modules}
    integer = (Int8Weight, native_ops.PackedWeight)  # a PackedWeight: kept packed (engine/loader/served_cache.py)
    served = all(isinstance(layers.get(group), integer) and native_ops.serves(layers[group]) for group in groups)
    return (native_linear and engine.max_loras > 0 and served
            and lora_native.fits(groups, projection_shapes(model)))


def empty_slots(model: ModelConfig, engine: EngineConfig, dtype, native: bool = False) -> dict:
    """The layers' LoRA weights, all zeros: `max_loras` slots of rank `max_lora_rank`; in
    the native kernels' layout where `native` (`native_slots`)."""
    if not engine.max_loras:
        return {}
    shapes = projection_shapes(model)
    if native:
        return lora_native.empty_slots(model, engine, adapted_groups(engine, model), shapes, PREFIX)
    width = engine.max_loras * engine.max_lora_rank
    weights = {}
    for group, modules in adapted_groups(engine, model).items():
        if not modules:
            continue
        inner = shapes[modules[0]][1]
        weights[f"{PREFIX}a_{group}"] = jnp.zeros((model.num_layers, inner, len(modules) * width), dtype)
        for module in modules:
            weights[f"{PREFIX}b_{group}_{module}"] = jnp.zeros((model.num_layers, width, shapes[module][0]), dtype)
    return weights


def is_lora_weight(name) -> bool:
    return str(name).startswith(PREFIX)


@dataclass(frozen=True)
class RowAdapters:
    """Each token's adapter slot inside a traced step, and how to add its product."""

    onehot: jax.Array  # [tokens, slots]: 1 at the token's row's slot; all 0 for the base and padding
    widths: dict  # PEFT module -> output width, for the columns of modules no slot adapts
    rank: int  # of every slot (max_lora_rank)

    def add(self, out, x, weights: dict, group: str):
        """`out` = x W of the fused projection `group`, plus each token's adapter's (scale) x A B."""
        a = weights.get(f"{PREFIX}a_{group}")
        if a is None:
            return out
        modules = [module for module in GROUPS[group] if f"{PREFIX}b_{group}_{module}" in weights]
        num_tokens, num_slots = x.shape[0], self.onehot.shape[1]
        if lora_native.is_native_slot(a):
            xa = lora_native.a_products(x, a, len(modules) * num_slots * self.rank)
        else:
            xa = x @ a
        xa = xa.reshape(num_tokens, len(modules), num_slots, self.rank)
        xa = (xa * self.onehot[:, None, :, None].astype(xa.dtype)).reshape(num_tokens, len(modules), -1)
        parts = []
        for module in GROUPS[group]:
            if module in modules:
                b = weights[f"{PREFIX}b_{group}_{module}"]
                part = xa[:, modules.index(module)]
                parts.append(lora_native.b_product(part, b) if lora_native.is_native_slot(b) else part @ b)
            else:
                parts.append(jnp.zeros((num_tokens, self.widths[module]), out.dtype))
        return out + jnp.concatenate(parts, axis=-1).astype(out.dtype)


def row_adapters(model: ModelConfig, slots: jax.Array, token_rows: jax.Array, num_slots: int,
                 rank: int) -> RowAdapters | None:
    """The RowAdapters of a batch whose row r uses slot slots[r] (-1: the base); None without slots."""
    if not num_slots:
        return None
    token_slots = jnp.where(token_rows >= 0, slots[jnp.maximum(token_rows, 0)], -1)
    widths = {module: shape[0] for module, shape in projection_shapes(model).items()}
    return RowAdapters(jax.nn.one_hot(token_slots, num_slots, dtype=jnp.float32), widths, rank)


def slot_values(adapter: LoraAdapter | None, model: ModelConfig, engine: EngineConfig) -> dict:
    """One slot's share of each LoRA weight, as host arrays: A [layers, in, modules, rank]
    and B [layers, rank, out] (scaled), zero-padded to max_lora_rank; zeros for None."""
    rank = engine.max_lora_rank
    shapes = projection_shapes(model)
    values = {}
    for group in GROUPS:
        modules = adapted_modules(group, engine, model)
        if not modules:
            continue
        a = np.zeros((model.num_layers, shapes[modules[0]][1], len(modules), rank), np.float32)
        for index, module in enumerate(modules):
            b = np.zeros((model.num_layers, rank, shapes[module][0]), np.float32)
            if adapter is not None and module in adapter.weights:
                a_module, b_module = adapter.weights[module]  # [layers, r, in], [layers, out, r]
                a[:, :, index, : adapter.rank] = a_module.transpose(0, 2, 1)
                b[:, : adapter.rank] = adapter.scale * b_module.transpose(0, 2, 1)
            values[f"{PREFIX}b_{group}_{module}"] = b
        values[f"{PREFIX}a_{group}"] = a
    return values


def check_fits(adapter: LoraAdapter, model: ModelConfig, engine: EngineConfig) -> None:
    """ValueError unless the slots can hold `adapter`: its rank and its modules."""
    if adapter.rank > engine.max_lora_rank:
        raise ValueError(f"adapter {adapter.name!r} has rank {adapter.rank}, above the server's "
                         f"max_lora_rank {engine.max_lora_rank}")
    served = {module for group in GROUPS for module in adapted_modules(group, engine, model)}
    unserved = [module for module in adapter.targets if module not in served]
    if unserved:
        raise ValueError(f"adapter {adapter.name!r} adapts {', '.join(unserved)}, which this server's "
                         f"LoRA targets ({', '.join(sorted(served))}) leave out")


def write_slot(weight: jax.Array, slot, value: jax.Array, num_slots: int, native: bool = False) -> jax.Array:
    """`weight` (a lora_a [layers, in, modules x slots x rank] or lora_b [layers, slots x
    rank, out]) with slot `slot` replaced by `value` (slot_values' shape); or one layer's of
    each, without the leading axis (the layers stored one array per layer); or, `native`,
    either in the native kernels' layout (engine/device/lora_native.py)."""
    if native:
        return lora_native.write_slot(weight, slot, value, num_slots)
    if weight.ndim == 2:
        return write_slot(weight[None], slot, value[None], num_slots)[0]
    if weight.ndim == 3 and value.ndim == 4:  # A: the slot is the middle of the last axis's (modules, slots, rank)
        layers, inner, modules, rank = value.shape
        grid = weight.reshape(layers, inner, modules, num_slots, rank)
        grid = jax.lax.dynamic_update_slice(grid, value[:, :, :, None, :].astype(weight.dtype), (0, 0, 0, slot, 0))
        return grid.reshape(weight.shape)
    layers, rank, out = value.shape
    grid = weight.reshape(layers, num_slots, rank, out)
    grid = jax.lax.dynamic_update_slice(grid, value[:, None].astype(weight.dtype), (0, slot, 0, 0))
    return grid.reshape(weight.shape)
