"""FP8 weights (`EngineConfig.quantization == "fp8"`): e4m3 values, float32 scales per output row.

A projection [..., out, in] is held as float8_e4m3fn values and a scale per output row, or per
row and group of inputs where a checkpoint published its weights in blocks (Hugging Face's
fine-grained FP8, `weight_block_size`: engine/loader/fp8_checkpoint.py keeps the blocks as
they are, a block's scale repeated over its rows). Half of bfloat16's bytes, which is what a
memory-bound decode step reads.

The product (`linear`):
- One scale per row: the row's scale commutes with the sum along the row, so the product
  runs on the e4m3 values themselves and the scales multiply its output. With
  `per_token_activations` (the default on accelerators) each token's activations are
  quantized to e4m3 too, with a scale per token, and both operands of the dot are FP8:
  the form XLA's GPU backend lowers to cuBLASLt's FP8 GEMM on sm_90. On the CPU the
  activations stay in their dtype (XLA's CPU dot widens FP8 operands anyway, so quantizing
  them would cost precision for nothing); the quality gate scores both forms there
  (tests/engine/test_quantization.py).
- Groups of inputs (a fine-grained checkpoint's blocks): each group's partial sums need
  their own scale, so the values are widened and scaled inside the product, as int8 groups
  are (engine/device/weights.py).

e4m3 has no infinity: a cast of anything past 448 gives NaN, so every quantization clips to
±448 first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp

FP8 = jnp.float8_e4m3fn
FP8_MAX = 448.0  # e4m3's largest finite value


@partial(jax.tree_util.register_dataclass, data_fields=["values", "scales"],
         meta_fields=["per_token_activations"])
@dataclass
class Fp8Weight:
    """A matrix [..., out, in] as e4m3 values and float32 scales [..., out, groups] (1 group: per row)."""

    values: jax.Array  # float8_e4m3fn [..., out, in]
    scales: jax.Array  # float32 [..., out, groups]
    per_token_activations: bool = field(default=False)  # the dot's other operand quantized per token

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape


def default_per_token_activations() -> bool:
    """FP8 activations where the backend has an FP8 GEMM to run them through (not the CPU)."""
    return jax.default_backend() != "cpu"


def saturated(x):
    """x clipped to e4m3's range and cast: no value becomes NaN."""
    return jnp.clip(x, -FP8_MAX, FP8_MAX).astype(FP8)


def e4m3_rows(x):
    """x [..., rows, width] as e4m3 with a float32 scale per row [..., rows, 1]: symmetric,
    each row's largest magnitude mapped to 448 (a weight's output rows, or a step's tokens)."""
    x32 = jnp.asarray(x).astype(jnp.float32)
    scales = jnp.max(jnp.abs(x32), axis=-1, keepdims=True) / FP8_MAX
    safe = jnp.where(scales > 0, scales, 1.0)
    return saturated(x32 / safe), scales


@partial(jax.jit, static_argnames="per_token_activations")
def quantize_fp8(matrix, per_token_activations: bool = False) -> Fp8Weight:
    """Symmetric e4m3 per output row: each row's largest magnitude maps to 448."""
    return Fp8Weight(*e4m3_rows(matrix), per_token_activations)


def widened_groups(values, scales, dtype=jnp.float32) -> jax.Array:
    """values [..., out, in] (e4m3 or int8) times scales [..., out, groups], each scale over
    its group of in // groups inputs: the matrix in `dtype`."""
    groups = values.reshape(*scales.shape, -1).astype(dtype) * scales[..., None].astype(dtype)
    return groups.reshape(values.shape)


def linear(x, weight: Fp8Weight):
    """x [t, in] times `weight` [out, in]: [t, out] in x's dtype."""
    if weight.scales.shape[-1] != 1:  # a checkpoint's blocks: scaled inside the product
        return x @ widened_groups(weight.values, weight.scales, x.dtype).T
    row_scales = weight.scales[..., 0]
    dims = (((1,), (1,)), ((), ()))
    if weight.per_token_activations:
        tokens, token_scales = e4m3_rows(x)  # a scale per token
        out = jax.lax.dot_general(tokens, weight.values, dims, preferred_element_type=jnp.float32)
        return (out * token_scales * row_scales).astype(x.dtype)
    out = jax.lax.dot_general(x, weight.values.astype(x.dtype), dims, preferred_element_type=jnp.float32)
    return (out * row_scales).astype(x.dtype)
