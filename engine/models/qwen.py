"""Qwen2 and Qwen3: the Llama decoder (engine/models/llama.py) with one feature each.

- Qwen2 always biases its q, k and v projections.
- Qwen3 normalizes each head of q and k (RMSNorm over head_dim) before RoPE.

llama.cpp converts both without permuting Q and K (it runs them with NeoX-style RoPE, the
Hugging Face layout).
"""

from __future__ import annotations

from engine.models.family import Family
from engine.models.llama import (GGUF_TENSORS, HF_TENSORS, Llama, hf_layer_windows, llama_param_specs,
                                 refuse_extra_biases)


def qwen_windows(c: dict) -> dict:
    """Qwen configs carry a sliding_window and switch it on explicitly, for the layers from
    max_window_layers on."""
    first = c.get("max_window_layers", c["num_hidden_layers"])
    return hf_layer_windows(c, lambda layer: bool(c.get("use_sliding_window")) and layer >= first)


def qwen2_hf_features(c: dict, architecture: str) -> dict:
    if c.get("mlp_bias"):
        raise ValueError(f"{architecture} with mlp_bias=true is not supported")
    return {"attention_bias": True, **qwen_windows(c)}


def qwen3_hf_features(c: dict, architecture: str) -> dict:
    refuse_extra_biases(c, architecture)
    return {"qk_norm": True, **qwen_windows(c)}


QWEN2 = Family(
    name="qwen2", decoder=Llama, param_specs=llama_param_specs,
    hf_architectures=("Qwen2ForCausalLM",), hf_tensors=HF_TENSORS, hf_features=qwen2_hf_features,
    gguf_architectures=("qwen2",), gguf_tensors=GGUF_TENSORS, gguf_features=lambda get, arch: {"attention_bias": True},
)

QWEN3 = Family(
    name="qwen3", decoder=Llama, param_specs=llama_param_specs,
    hf_architectures=("Qwen3ForCausalLM",), hf_tensors=HF_TENSORS, hf_features=qwen3_hf_features,
    gguf_architectures=("qwen3",), gguf_tensors=GGUF_TENSORS, gguf_features=lambda get, arch: {"qk_norm": True},
)
