"""The layers every model family shares: projections (float, int8 or FP8), RMSNorm, RoPE, the
gated MLP, the q/k/v projection, how the layers' weights lie in the model's state, and the
loop over layers.

The layer loop takes the form that measures best on the backend (`layer_loop_for`):
- "scan": a `lax.scan` over the stacked weights, compiled once instead of once per layer.
  On the CPU it is the fastest form (27 against 161 ms for an unrolled loop at batch 1,
  SmolLM2 in float32).
- "unrolled": a Python loop over layers whose weights are stored one array per layer
  (`LayerLayout(per_layer=True)`). XLA's GPU backend copies each layer's weights out of the stack
  before a scan's matmuls read them (55% of an 8B decode step on an H100). A static slice
  `stacked[i]` is read in place only outside a loop: the engine's step runs its rounds of
  decode in a `fori_loop` (engine/device/runner.py), and inside it the static slices were
  copied too (40.6% of the 8B's batch-1 step on an H100, 2026-11-27). Arrays of their own
  are read where they lie wherever the loop runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.config import AUTO, LAYER_LOOPS, LINEAR, SCAN, UNROLLED, ModelConfig, RopeScaling
from engine.device.lora import RowAdapters, is_lora_weight
from engine.device.native import ops as native_ops
from engine.device import fp8, layer_forms
from engine.device.integer_weight import Int8Weight, dequantize


def linear(x, weight):
    """x [t, in] times a weight stored [out, in] (float, Int8Weight, Fp8Weight, or a
    NativeWeight the native CPU kernel reads in place)."""
    if isinstance(weight, native_ops.NativeWeight):  # every count of tokens: one order of sums
        return native_ops.linear(x, weight).astype(x.dtype)
    if isinstance(weight, layer_forms.LayerOfForms):  # the kernel of the layer's form
        return layer_forms.linear(x, weight).astype(x.dtype)
    if isinstance(weight, fp8.Fp8Weight):
        return fp8.linear(x, weight)
    if isinstance(weight, Int8Weight):
        weight = dequantize(weight, x.dtype)  # widened inside the product
    if x.shape[0] == 1:
        # A matrix-vector product. jax 0.11's CPU backend runs `x @ W.T` at one row several
        # times slower than this form (1.4 against 0.2 ms for SmolLM2's 3072 x 576 in float32).
        return jnp.einsum("ti,oi->to", materialized(x), weight)
    return x @ weight.T


def materialized(x):
    """x, computed into a buffer of its own before a matrix-vector product reads it.

    XLA's CPU backend fuses the ops that compute a matrix-vector product's vector into the
    product, and then recomputes them for every output row: the attention epilogue before
    wo cost 5.5 ms of a 16 ms one-token step. A reduction is never fused that way, so x goes
    through one (over a stack of x and zeros: exact, and optimization_barrier is dropped
    before fusion on this backend)."""
    return jnp.stack([x, jnp.zeros_like(x)]).sum(axis=0)


def rms_norm(x, weight, eps: float):
    x32 = x.astype(jnp.float32)
    mean_square = ordered_sum(x32 * x32)[..., None] / x.shape[-1]
    normed = x32 * jax.lax.rsqrt(mean_square + eps)
    return (normed * weight).astype(x.dtype)


def ordered_sum(x):
    """The sum over x's last axis in one order for every row: halves added pairwise, as
    elementwise adds of slices (zeros pad it to a power of two). XLA's own reduction over
    a row of 576 sums in an order that depends on how many rows the array has and where
    the row lies among them, so a row's norm moved in its last bit with the batch, and
    inputs rounded to bfloat16 after it turned that into a step of 2^-8
    (tests/engine/test_batch_invariance.py)."""
    width = x.shape[-1]
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, (1 << (width - 1).bit_length()) - width)])
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def llama3_scaled(inv_freq, scaling: RopeScaling):
    """Llama 3.1's rescaling: long wavelengths slowed by `factor`, short ones kept, blended between."""
    wavelen = 2 * math.pi / inv_freq
    old_context = scaling.original_max_position_embeddings
    low_freq_wavelen = old_context / scaling.low_freq_factor
    high_freq_wavelen = old_context / scaling.high_freq_factor
    blend = (old_context / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    blended = (1 - blend) * inv_freq / scaling.factor + blend * inv_freq
    scaled = jnp.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    is_between = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return jnp.where(is_between, blended, scaled)


def rope_inv_freq(config: ModelConfig, freq_factors=None):
    """Inverse frequencies [head_dim // 2] of the rotary embedding."""
    exponents = jnp.arange(0, config.head_dim, 2, dtype=jnp.float32) / config.head_dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    if config.rope_scaling is not None and config.rope_scaling.kind == LINEAR:
        inv_freq = inv_freq / config.rope_scaling.factor
    elif config.rope_scaling is not None:
        inv_freq = llama3_scaled(inv_freq, config.rope_scaling)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    return inv_freq


def apply_rope(x, positions, inv_freq):
    """Rotate [t, heads, d] by position, the first half of each head against the second."""
    angles = positions[:, None].astype(jnp.float32) * inv_freq[None, :]  # [t, d/2]
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


@dataclass(frozen=True)
class LayerLayout:
    """How the decoder layers' weights (engine/device/weights.py) lie in the model's state:
    each stacked on a leading [layers] axis, which a scan reads, or, for the unrolled loop,
    one array per layer under `layer_key` (`per_layer`; the module's docstring says why)."""

    names: tuple[str, ...]  # the weights of a layer
    per_layer: bool = False

    def store(self, weights: dict) -> dict:
        """The state's layers: takes each stack out of `weights` as it stores it, so that
        splitting a stack into layers holds one stack beside the layers at a time, not a
        second copy of the model."""
        layers = {}
        for name in self.names:
            stack = weights.pop(name)
            if not self.per_layer:
                layers[name] = stack
                continue
            for index in range(jax.tree_util.tree_leaves(stack)[0].shape[0]):
                layers[layer_key(name, index)] = layer_weights(stack, index)
            del stack  # before the next stack is taken: one stack beside the layers, not two
        return layers

    def stacked(self, layers: dict) -> dict:
        """Every weight, stacked on its leading [layers] axis (a scan's form)."""
        assert not self.per_layer, "the layers are stored one array per layer"
        return {name: layers[name] for name in self.names}

    def layer(self, layers: dict, index: int) -> dict:
        """Layer `index`'s weights, each an array of its own (the unrolled loop's form)."""
        assert self.per_layer, "the layers are stored stacked"
        return {name: layers[layer_key(name, index)] for name in self.names}


def layer_key(name: str, index: int) -> str:
    """The attribute, and key in the model's state, of weight `name`'s layer `index` when
    the layers are stored one array per layer."""
    return f"{name}_{index}"


def layer_loop_for(requested: str, backend: str, cache_per_layer: bool = False) -> str:
    """The layer loop `requested` stands for on `backend` ("cpu", "gpu", "tpu"): auto is an
    unrolled loop on GPUs and a scan elsewhere (the module's docstring says why), and always
    unrolled over a cache kept as an array per layer (engine/device/kv_cache.py LayerKVCache),
    which a scan cannot carry."""
    if requested not in LAYER_LOOPS:
        raise ValueError(f"layer_loop must be one of {', '.join(LAYER_LOOPS)}, not {requested!r}")
    if cache_per_layer:
        if requested == SCAN:
            raise ValueError("layer_loop scan cannot carry a KV cache kept as an array per layer (the TPU "
                             "kernel's): use unrolled, or auto")
        return UNROLLED
    if requested != AUTO:
        return requested
    return UNROLLED if backend == "gpu" else SCAN


def layer_weights(stacked, index):
    """Layer `index`'s weights out of the stacked ones (a pytree), by static slices, or by
    dynamic ones where `index` is traced."""
    return jax.tree_util.tree_map(lambda weight: weight[index], stacked)


def live_tokens(token_rows):
    """How many of a step's tokens the native kernels compute: through its last real one
    (token_rows >= 0; the runner packs them first, engine/device/step_io.py `token_spans`,
    and a bucket's padding after them)."""
    through = jnp.arange(1, token_rows.shape[0] + 1, dtype=jnp.int32)
    return jnp.max(jnp.where(token_rows >= 0, through, 0))


def live_sequences(token_rows):
    """How many of a step's sequence rows the head computes: through the last row a real
    token belongs to (rows are packed from the first; the rest are the bucket's padding)."""
    return jnp.max(token_rows) + 1


def native_layer_weights(stacked: dict, index, live=None) -> dict:
    """Layer `index` (traced, in a scan) of the stacked weights for the native CPU kernels:
    each weight packed for them (`packed_for_native`) as the whole stack and the index, read
    in place, over the first `live` tokens (ops.py `at_layer`); the rest sliced out (norms,
    biases)."""
    def at(name, weight):
        if isinstance(weight, native_ops.PackedWeight):
            return native_ops.at_layer(weight, index, live)
        if isinstance(weight, layer_forms.LayerForms):  # a stack per form, each packed
            return layer_forms.at_layer(weight, index, live)
        return layer_weights(weight, index)

    return {name: at(name, weight) for name, weight in stacked.items()}


def packed_for_native(state: dict, native_lora: bool) -> dict:
    """The model's state with each weight the native kernels read packed in their blocks
    (engine/device/native/ops.py `packed`): the int8 projections they serve, the int8
    head (and so the embedding, which reads its rows from it), and the adapter slots where
    they are laid out for the kernels (`native_lora`)."""
    def pack(name, weight):
        if isinstance(weight, layer_forms.LayerForms):  # each form's stack, where the kernels serve them all
            packed = layer_forms.packed_stacks(weight, lambda matrix: pack(name, matrix))
            if packed is not None:
                return packed
            weight = layer_forms.one_form(weight)
        served = isinstance(weight, Int8Weight) or (native_lora and is_lora_weight(name))
        if not (served and native_ops.serves(weight)):
            return weight
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(weight)):
            return native_ops.packed(weight)  # under jit (a weight update): on the device
        # In NumPy on the host, then back: jnp's eager reshapes compiled a program for each
        # weight's shape, 0.9 s of a warm start.
        return jax.device_put(native_ops.packed(jax.device_get(weight)))

    packed = {name: pack(name, weight) for name, weight in state.items() if name != "layers"}
    packed["layers"] = {name: pack(name, weight) for name, weight in state["layers"].items()}
    return packed


def replace_embeddings(x, rows, token_index):
    """x [tokens, hidden] with `rows` [R, hidden] in place of the tokens `token_index` [R]
    names (-1: an unused row). Behind a cond on the R indices, so a batch without any costs
    no scatter."""
    def swap():
        index = jnp.where(token_index >= 0, token_index, x.shape[0])  # out of range: dropped
        return x.at[index].set(rows.astype(x.dtype), mode="drop")

    return jax.lax.cond(jnp.any(token_index >= 0), swap, lambda: x)


def project(x, weights: dict, name: str, adapters: RowAdapters | None = None):
    """x times the served projection `name`, plus each token's LoRA adapter's product
    where the step has adapter slots (engine/device/lora.py)."""
    out = linear(x, weights[name])
    return out if adapters is None else adapters.add(out, x, weights, name)


def mlp(h, weights: dict, activation=jax.nn.silu, adapters: RowAdapters | None = None):
    """A gated MLP through the fused gate|up matrix: activation(gate) * up, then down
    (SwiGLU with silu, Gemma's GeGLU with tanh-approximated gelu)."""
    gate, up = jnp.split(project(h, weights, "w_gate_up", adapters), 2, axis=-1)
    return project(activation(gate) * up, weights, "w_down", adapters)


def project_qkv(config: ModelConfig, h, weights: dict, positions, inv_freq, norm=None,
                adapters: RowAdapters | None = None):
    """Queries [t, heads, d] and keys, values [t, kv_heads, d], with bias, qk-norm (`norm`,
    default RMSNorm) and RoPE."""
    qkv = project(h, weights, "wqkv", adapters)
    if config.attention_bias:
        qkv = qkv + weights["bqkv"]
    num_tokens = h.shape[0]
    q, k, v = jnp.split(qkv, [config.q_size, config.q_size + config.kv_size], axis=-1)
    q = q.reshape(num_tokens, config.num_heads, config.head_dim)
    k = k.reshape(num_tokens, config.num_kv_heads, config.head_dim)
    v = v.reshape(num_tokens, config.num_kv_heads, config.head_dim)
    if config.qk_norm:
        norm = norm or (lambda x, weight: rms_norm(x, weight, config.rms_norm_eps))
        q, k = norm(q, weights["q_norm"]), norm(k, weights["k_norm"])
    return apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq), v
