"""Integer values of fewer than 8 bits as the native kernels keep them (engine/device/native/
ops.py `packed`): 4-bit values two a byte (`nibbles`), 6-bit ones in three quarters of a
byte (`six_bits`), and the int8 values each packing undoes to."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def nibbles(values, signed: bool, steps: int = 1):
    """4-bit values [..., steps, block] (int8: -8..7 where `signed`, else 0..15) two a byte,
    [..., steps, block / 2], as the kernels read them: in a unit of `steps` steps, byte b
    holds value b in its low half and value b + unit / 2 in its high half (blocks.h
    `block_of_nibbles`: one step; dot_values.h `DotNibbles`: two)."""
    xp = np if isinstance(values, np.ndarray) else jnp
    *lead, count, block = values.shape
    unit = values.reshape(*lead, count // steps, steps * block)
    unsigned = (unit.astype(xp.int16) + (8 if signed else 0)).astype(xp.uint8)
    half = unsigned.shape[-1] // 2
    return (unsigned[..., :half] | (unsigned[..., half:] << 4)).reshape(*lead, count, block // 2)


def six_bits(values, signed: bool, steps: int = 1):
    """6-bit values [..., steps, block] (int8: -32..31 where `signed`, else 0..63) in 3/4 of
    a byte each, [..., steps, 3 block / 4], as the kernels read them: in a unit of `steps`
    steps, their low halves as `nibbles` packs them, then their top two bits four a byte,
    byte i holding those of values i, i + u, i + 2u, i + 3u (u: a quarter of the unit) at
    bits 0, 2, 4, 6 (blocks.h `block_of_six`, dot_values.h `DotSixBits`)."""
    xp = np if isinstance(values, np.ndarray) else jnp
    *lead, count, block = values.shape
    unit = values.reshape(*lead, count // steps, steps * block)
    unsigned = (unit.astype(xp.int16) + (32 if signed else 0)).astype(xp.uint8)
    low = nibbles(unsigned & 15, signed=False, steps=1)  # the unit as one step of `nibbles`
    tops = (unsigned >> 4).reshape(*unsigned.shape[:-1], 4, -1)
    top_bytes = tops[..., 0, :] | (tops[..., 1, :] << 2) | (tops[..., 2, :] << 4) | (tops[..., 3, :] << 6)
    return xp.concatenate([low, top_bytes], axis=-1).reshape(*lead, count, 3 * block // 4)


def widened_six_bits(packed, signed: bool, steps: int = 1):
    """The int8 values `six_bits` packed."""
    xp = np if isinstance(packed, np.ndarray) else jnp
    *lead, count, width = packed.shape
    unit = packed.reshape(*lead, count // steps, steps * width)
    size = unit.shape[-1] * 4 // 3
    low = widened_nibbles(unit[..., :size // 2], signed=False)
    tops = xp.concatenate([(unit[..., size // 2:] >> shift) & 3 for shift in (0, 2, 4, 6)], axis=-1)
    values = (low | (tops.astype(xp.int8) << 4)).reshape(*lead, count, 4 * width // 3)
    return values - 32 if signed else values


def widened_nibbles(packed, signed: bool, steps: int = 1):
    """The int8 values `nibbles` packed."""
    xp = np if isinstance(packed, np.ndarray) else jnp
    *lead, count, half = packed.shape
    unit = packed.reshape(*lead, count // steps, steps * half)
    values = xp.concatenate([unit & 15, unit >> 4], axis=-1).astype(xp.int8).reshape(*lead, count, 2 * half)
    return values - 8 if signed else values


# Values of fewer than 8 bits: bits -> (their packing, its undoing).
SMALL_BITS = {4: (nibbles, widened_nibbles), 6: (six_bits, widened_six_bits)}
