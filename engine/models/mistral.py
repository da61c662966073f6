"""Mistral: the Llama decoder (engine/models/llama.py); its config's sliding_window applies
to every layer whenever it is set (Mistral 7B v0.1: 4,096 keys). llama.cpp converts Mistral as a llama, so its GGUF files load as the
Llama family."""

from __future__ import annotations

from engine.models.family import Family
from engine.models.llama import HF_TENSORS, Llama, hf_layer_windows, llama_param_specs, refuse_extra_biases


def mistral_hf_features(c: dict, architecture: str) -> dict:
    refuse_extra_biases(c, architecture)
    return hf_layer_windows(c, lambda layer: c.get("use_sliding_window", True))


MISTRAL = Family(
    name="mistral", decoder=Llama, param_specs=llama_param_specs,
    hf_architectures=("MistralForCausalLM",), hf_tensors=HF_TENSORS, hf_features=mistral_hf_features,
)
