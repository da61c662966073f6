"""LoRA slots laid out for the native CPU kernels (engine/device/native), so that an adapted
row's result does not depend on its neighbours either.

XLA's CPU matmul orders its sums by the count of rows (README, "A row's result does not
depend on its neighbours"), so slots multiplied by it gave an adapted row other bits in a
busy step than alone. Under the native kernels the slots are kept as the kernel reads a
weight, [out, in] in bfloat16 packed in its blocks (engine/device/native/ops.py `packed`, at
the model's start), and both products of the adapter go through it, one order of sums
whatever shares the call:
- `lora_a_<group>` [layers, modules x slots x rank (to whole blocks of rows), in];
- `lora_b_<group>_<module>` [layers, out, slots x rank (to whole steps of inputs)].
The padding is zeros, and the rows and columns past slots x rank are never read back. An
adapter is kept in bfloat16 here (as PEFT files mostly hold them); its inputs are rounded to
bfloat16 by the kernel, as every product's are.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.config import EngineConfig, ModelConfig
from engine.device import native
from engine.device.native import ops as native_ops


def padded(count: int, multiple: int) -> int:
    return -(-count // multiple) * multiple


def fits(groups: dict[str, tuple[str, ...]], shapes: dict) -> bool:
    """Whether the kernel serves every product of the slots of `groups` (fused projection ->
    its adapted modules): each input width a whole number of blocks, each output a whole
    number of blocks of rows. (The slots' own widths are padded to fit.)"""
    rows, step = native.block_shape()
    for modules in groups.values():
        if not modules:
            continue
        if shapes[modules[0]][1] % step:
            return False
        if any(shapes[module][0] % rows for module in modules):
            return False
    return True


def empty_slots(model: ModelConfig, engine: EngineConfig, groups: dict[str, tuple[str, ...]], shapes: dict,
                prefix: str) -> dict:
    """The slots' weights in the kernel's shapes, all zeros (packed with the model's state)."""
    width = engine.max_loras * engine.max_lora_rank
    block_rows, step = native.block_shape()
    weights = {}
    for group, modules in groups.items():
        if not modules:
            continue
        inner = shapes[modules[0]][1]
        rows = padded(len(modules) * width, block_rows)
        weights[f"{prefix}a_{group}"] = jnp.zeros((model.num_layers, rows, inner), jnp.bfloat16)
        for module in modules:
            weights[f"{prefix}b_{group}_{module}"] = jnp.zeros(
                (model.num_layers, shapes[module][0], padded(width, step)), jnp.bfloat16)
    return weights


def write_slot(weight: native_ops.PackedWeight, slot, value: jax.Array, num_slots: int) -> native_ops.PackedWeight:
    """`weight` in the kernel's layout with slot `slot` replaced by `value`: an A as
    slot_values gives it [layers, in, modules, rank], or a B [layers, rank, out]."""
    return native_ops.packed(written(native_ops.unpacked(weight), slot, value, num_slots))


def written(weight: jax.Array, slot, value: jax.Array, num_slots: int) -> jax.Array:
    """An unpacked slot array [layers, out, in] with slot `slot` replaced by `value`."""
    if value.ndim == 4:  # A: rows (modules, slots, rank), each of the input's width
        layers, inner, modules, rank = value.shape
        used = modules * num_slots * rank
        grid = weight[:, :used].reshape(layers, modules, num_slots, rank, inner)
        rows = value.transpose(0, 2, 3, 1)[:, :, None].astype(weight.dtype)
        grid = jax.lax.dynamic_update_slice(grid, rows, (0, 0, slot, 0, 0))
        return weight.at[:, :used].set(grid.reshape(layers, used, inner))
    layers, rank, out = value.shape  # B: inputs (slots, rank) of each output
    used = num_slots * rank
    grid = weight[:, :, :used].reshape(layers, out, num_slots, rank)
    columns = value.transpose(0, 2, 1)[:, :, None].astype(weight.dtype)
    grid = jax.lax.dynamic_update_slice(grid, columns, (0, 0, slot, 0))
    return weight.at[:, :, :used].set(grid.reshape(layers, out, used))


def is_native_slot(weight) -> bool:
    return isinstance(weight, native_ops.NativeWeight)


def a_products(x, a: native_ops.NativeWeight, used: int):
    """x [tokens, in] times every slot's A: [tokens, used]."""
    return native_ops.linear(x, a)[:, :used]


def b_product(xa, b: native_ops.NativeWeight):
    """xa [tokens, slots x rank] (masked to each token's slot) times B: [tokens, out]."""
    width = b.shape[1]
    return native_ops.linear(jnp.pad(xa, ((0, 0), (0, width - xa.shape[1]))), b)
