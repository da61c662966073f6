"""Gemma 2 and Gemma 3 (text): the Llama decoder's stages (engine/models/llama.py) with
Gemma's definitions.

- The embedding is scaled by sqrt(hidden_size), in the compute dtype.
- RMSNorm multiplies by (1 + weight), in float32; every block is normed before and after:
  attention and MLP outputs pass a post-norm before their residual add.
- The MLP is GeGLU: gelu(gate, tanh approximation) * up.
- Scores are scaled by query_pre_attn_scalar ** -1/2 rather than head_dim's.
- Windowed ("local") layers alternate with full ("global") ones: every other layer from
  the first in Gemma 2, five local to one global in Gemma 3 (ModelConfig.layer_windows).
- Gemma 2 soft-caps attention scores and final logits (cap * tanh(x / cap)); Gemma 3
  instead normalizes each head of q and k (qk-norm), and its local layers rotate with
  their own RoPE base (rope_local_base_freq), unscaled, while global layers take
  rope_theta and the config's scaling.

llama.cpp's converter stores every norm weight plus one, so that its plain RMSNorm
computes Gemma's; the GGUF reader takes the one back off (`gguf_norm_offset`).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from engine.config import ModelConfig
from engine.models.family import Family, MetadataGetter, ParamSpec, TensorNames
from engine.models.layers import mlp, project, rope_inv_freq
from engine.models.llama import GGUF_TENSORS as LLAMA_GGUF
from engine.models.llama import HF_TENSORS as LLAMA_HF
from engine.models.llama import Llama, Step, hf_layer_windows, llama_param_specs

GEMMA2, GEMMA3 = "gemma2", "gemma3"


def gemma_rms_norm(x, weight, eps: float):
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * (1.0 + weight.astype(jnp.float32))).astype(x.dtype)


def soft_cap(x, cap: float | None):
    return x if cap is None else cap * jnp.tanh(x / cap)


class Gemma(Llama):
    """A Gemma 2 or 3 decoder over the paged KV cache."""

    def embed_tokens(self, token_ids):
        x = super().embed_tokens(token_ids)
        return x * jnp.asarray(math.sqrt(self.config.hidden_size), x.dtype)

    def norm(self, x, weight):
        return gemma_rms_norm(x, weight, self.config.rms_norm_eps)

    def layer(self, x, cache, index, weights: dict, step: Step):
        config = self.config
        scale = (config.query_pre_attn_scalar or config.head_dim) ** -0.5
        attn, cache = self.attend(self.norm(x, weights["attn_norm"]), cache, index, weights, step,
                                  self.layer_rope(index, step), scale, softcap=config.attn_logit_softcapping)
        x = x + self.norm(project(attn, weights, "wo", step.adapters), weights["post_attn_norm"])
        h, routing = self.feed_forward(self.norm(x, weights["mlp_norm"]), weights, index, step)
        return x + self.norm(h, weights["post_mlp_norm"]), cache, routing

    def feed_forward(self, h, weights: dict, index, step: Step):
        """GeGLU: gelu (tanh approximation) in place of SwiGLU's silu."""
        return mlp(h, weights, partial(jax.nn.gelu, approximate=True), step.adapters), None

    def layer_rope(self, index, step: Step):
        """Layer `index`'s RoPE frequencies: a local layer of Gemma 3 rotates with its own
        base, unscaled; the others with the step's (rope_theta and the config's scaling)."""
        config = self.config
        if config.rope_local_theta is None or not any(config.layer_windows):
            return step.inv_freq
        local = jnp.asarray([window > 0 for window in config.layer_windows])[index]
        local_rope = rope_inv_freq(config.replace(rope_theta=config.rope_local_theta, rope_scaling=None))
        return jnp.where(local, local_rope, step.inv_freq)

    def logits(self, hidden, live=None):
        return soft_cap(super().logits(hidden, live), self.config.final_logit_softcapping)


def gemma_param_specs(config: ModelConfig) -> dict:
    """Llama's weights, plus each block's post-norm (and Gemma 3's qk-norm weights)."""
    specs = llama_param_specs(config)
    norm = ParamSpec((config.num_layers, config.hidden_size), ("layers", None))
    specs["layers"].update(post_attn_norm=norm, post_mlp_norm=norm)
    return specs


def _gemma_names(names: TensorNames, post_attn_norm: str, mlp_norm: str, post_mlp_norm: str) -> TensorNames:
    """Llama's names without q/k/v biases, and Gemma's four norms a layer."""
    layer = {name: pattern for name, pattern in names.layer.items() if name not in ("bq", "bk", "bv")}
    return TensorNames(top=names.top, layer={**layer, "post_attn_norm": post_attn_norm, "mlp_norm": mlp_norm,
                                             "post_mlp_norm": post_mlp_norm})


HF_TENSORS = _gemma_names(LLAMA_HF, "model.layers.{i}.post_attention_layernorm.weight",
                          "model.layers.{i}.pre_feedforward_layernorm.weight",
                          "model.layers.{i}.post_feedforward_layernorm.weight")
GGUF_TENSORS = _gemma_names(LLAMA_GGUF, "blk.{i}.post_attention_norm.weight", "blk.{i}.ffn_norm.weight",
                            "blk.{i}.post_ffw_norm.weight")

# Which layers are local when a config does not list them: every other one from the first
# (Gemma 2), or all but every sixth (Gemma 3's sliding_window_pattern).
DEFAULT_PATTERN = {GEMMA2: 2, GEMMA3: 6}


def local_every(pattern: int):
    return lambda layer: (layer + 1) % pattern != 0


def gemma2_hf_features(c: dict, architecture: str) -> dict:
    return {**_gemma_hf(c, GEMMA2), "attn_logit_softcapping": c.get("attn_logit_softcapping"),
            "final_logit_softcapping": c.get("final_logit_softcapping")}


def gemma3_hf_features(c: dict, architecture: str) -> dict:
    if c.get("attn_logit_softcapping") or c.get("final_logit_softcapping"):
        raise ValueError(f"{architecture} with logit soft-capping is not supported")
    return {**_gemma_hf(c, GEMMA3), "qk_norm": True, "rope_local_theta": float(c.get("rope_local_base_freq", 10000.0))}


def _gemma_hf(c: dict, name: str) -> dict:
    _refuse_other_activations(c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh")
    pattern = int(c.get("sliding_window_pattern") or DEFAULT_PATTERN[name])
    return {**hf_layer_windows(c, local_every(pattern)), "tie_word_embeddings": bool(c.get("tie_word_embeddings", True)),
            "query_pre_attn_scalar": float(c.get("query_pre_attn_scalar") or c.get("head_dim") or 256)}


def _refuse_other_activations(activation: str) -> None:
    if activation not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(f"Gemma with hidden activation {activation!r} is not supported (gelu_pytorch_tanh is)")


def gemma_gguf_features(get: MetadataGetter, arch: str) -> dict:
    """Gemma's features from GGUF metadata, with llama.cpp's own rules where the file is
    silent: the local layers' pattern and RoPE base, and the query scale (the 27B models
    scale by hidden / heads, the others by head_dim)."""
    num_layers, window = int(get("block_count", None)), int(get("attention.sliding_window", 0) or 0)
    pattern = int(get("attention.sliding_window_pattern", DEFAULT_PATTERN[arch]) or DEFAULT_PATTERN[arch])
    is_27b = num_layers == {GEMMA2: 46, GEMMA3: 62}[arch]
    head_dim = int(get("attention.key_length", None))
    scalar = int(get("embedding_length", None)) / int(get("attention.head_count", None)) if is_27b else head_dim
    features = {"layer_windows": tuple(window if local_every(pattern)(layer) else 0 for layer in range(num_layers))
                if window else (), "query_pre_attn_scalar": float(scalar)}
    if arch == GEMMA2:
        return {**features, "attn_logit_softcapping": _optional_float(get("attn_logit_softcapping", None)),
                "final_logit_softcapping": _optional_float(get("final_logit_softcapping", None))}
    return {**features, "qk_norm": True, "rope_local_theta": 10000.0}


def _optional_float(value) -> float | None:
    # GGUF stores float32; its shortest spelling recovers the configured number (30.0, 50.0).
    return None if value is None else float(str(np.float32(value)))


GEMMA_FAMILIES = tuple(
    Family(name=name, decoder=Gemma, param_specs=gemma_param_specs,
           hf_architectures=(architecture,), hf_tensors=HF_TENSORS, hf_features=features,
           gguf_architectures=(name,), gguf_tensors=GGUF_TENSORS, gguf_features=gemma_gguf_features,
           gguf_norm_offset=1.0)
    for name, architecture, features in ((GEMMA2, "Gemma2ForCausalLM", gemma2_hf_features),
                                         (GEMMA3, "Gemma3ForCausalLM", gemma3_hf_features)))
