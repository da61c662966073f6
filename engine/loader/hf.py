"""Hugging Face checkpoints: config.json to a ModelConfig, safetensors to the weights pytree.

A directory holds either one `model.safetensors` or shards listed in
`model.safetensors.index.json`. Weights are read one tensor at a time, widened to float32
and stacked over layers; PyTorch's [out, in] is already the layout of engine/models/params.py.
Every tensor in the files must be used: an unexpected one (an o_proj
bias, say) means a model this engine would run wrongly, so it is refused by name.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
from safetensors import safe_open

from engine.config import ModelConfig, RopeScaling
from engine.models.params import param_specs

# Architecture name -> the ModelConfig features that architecture always has.
ARCHITECTURES = {
    "LlamaForCausalLM": {},  # Llama 2/3, SmolLM2
    "MistralForCausalLM": {},
    "Qwen2ForCausalLM": {"attention_bias": True},  # Qwen2 always biases q, k and v
    "Qwen3ForCausalLM": {"qk_norm": True},
}

# Layout name -> HF name inside model.layers.{i}.
LAYER_TENSORS = {
    "attn_norm": "input_layernorm.weight",
    "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight",
    "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias",
    "bv": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "mlp_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight",
    "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
}

# Non-persistent buffers some older checkpoints saved; recomputed by the model.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def config_from_hf(config_json: dict) -> ModelConfig:
    """The ModelConfig of a Hugging Face `config.json`; ValueError for what Flint cannot run."""
    c = config_json
    architecture = _architecture(c)
    _refuse_extra_biases(c, architecture)
    hidden, num_heads = c["hidden_size"], c["num_attention_heads"]
    rope = c.get("rope_parameters") or {}  # transformers 5 moved rope settings here
    return ModelConfig(
        vocab_size=c["vocab_size"],
        hidden_size=hidden,
        intermediate_size=c["intermediate_size"],
        num_layers=c["num_hidden_layers"],
        num_heads=num_heads,
        num_kv_heads=c.get("num_key_value_heads") or num_heads,
        head_dim=c.get("head_dim") or hidden // num_heads,
        rms_norm_eps=c.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
        rope_scaling=_rope_scaling(c.get("rope_scaling") or rope or None),
        max_position_embeddings=_max_positions(c, architecture),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        bos_token_id=c.get("bos_token_id"),
        eos_token_ids=_token_ids(c.get("eos_token_id")),
        **ARCHITECTURES[architecture],
    )


def _architecture(c: dict) -> str:
    names = c.get("architectures") or []
    for name in names:
        if name in ARCHITECTURES:
            return name
    raise ValueError(
        f"unsupported architecture {', '.join(names) or '(none named in config.json)'}; "
        f"Flint runs {', '.join(ARCHITECTURES)}"
    )


def _refuse_extra_biases(c: dict, architecture: str) -> None:
    # Llama's and Qwen3's attention_bias also biases o_proj, and mlp_bias the MLP: the
    # weights layout has no place for either.
    if architecture != "Qwen2ForCausalLM" and c.get("attention_bias"):
        raise ValueError(f"{architecture} with attention_bias=true is not supported")
    if c.get("mlp_bias"):
        raise ValueError(f"{architecture} with mlp_bias=true is not supported")


def _rope_scaling(scaling: dict | None) -> RopeScaling | None:
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise ValueError(f"unsupported rope scaling type {kind!r}; Flint supports 'llama3'")
    return RopeScaling(
        factor=float(scaling["factor"]),
        low_freq_factor=float(scaling["low_freq_factor"]),
        high_freq_factor=float(scaling["high_freq_factor"]),
        original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
    )


def _max_positions(c: dict, architecture: str) -> int:
    positions = int(c.get("max_position_embeddings", 2048))
    # Attention here is always full. Within the sliding window full attention is exact, so
    # a model with a smaller window is served with its context capped to that window.
    window = c.get("sliding_window")
    # Qwen configs switch the window on explicitly; Mistral's applies whenever it is set.
    uses_window = c.get("use_sliding_window", architecture == "MistralForCausalLM")
    if window and uses_window:
        positions = min(positions, int(window))
    return positions


def _token_ids(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def load_hf_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of the Hugging Face directory `directory`."""
    return config_from_hf(json.loads((Path(directory) / "config.json").read_text()))


def load_hf_params(directory: str | Path, config: ModelConfig) -> dict:
    """The float32 weights pytree (engine/models/params.py layout) from `directory`'s safetensors."""
    files = _tensor_files(Path(directory))
    _refuse_unused(files, config)
    with contextlib.ExitStack() as stack:
        handles = {path: stack.enter_context(safe_open(path, framework="numpy"))
                   for path in set(files.values())}

        def read(name: str) -> np.ndarray:
            if name not in files:
                raise ValueError(f"checkpoint lacks tensor {name}")
            return handles[files[name]].get_tensor(name).astype(np.float32)

        return _read_params(read, config)


def _read_params(read, config: ModelConfig) -> dict:
    params = {
        "embed": read("model.embed_tokens.weight"),
        "final_norm": read("model.norm.weight"),
        "layers": {name: _stack(read, config, name) for name in param_specs(config)["layers"]},
    }
    if not config.tie_word_embeddings:
        params["lm_head"] = read("lm_head.weight")
    return params


def _stack(read, config: ModelConfig, name: str) -> np.ndarray:
    hf_name = LAYER_TENSORS[name]
    layers = [read(f"model.layers.{i}.{hf_name}") for i in range(config.num_layers)]
    return np.ascontiguousarray(np.stack(layers))


def _refuse_unused(files: dict[str, Path], config: ModelConfig) -> None:
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    expected |= {f"model.layers.{i}.{LAYER_TENSORS[name]}"
                 for i in range(config.num_layers) for name in param_specs(config)["layers"]}
    # A tied checkpoint may still carry lm_head.weight (a copy of the embedding): harmless.
    unused = sorted(n for n in files if n not in expected and not n.endswith(IGNORED_SUFFIXES))
    if unused:
        raise ValueError(f"checkpoint has tensors this model does not use: {', '.join(unused[:5])}")


def _tensor_files(directory: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: directory / file for name, file in weight_map.items()}
    single = directory / "model.safetensors"
    if not single.is_file():
        raise ValueError(f"{directory} holds neither {single.name} nor {index.name}")
    with safe_open(single, framework="numpy") as f:
        return {name: single for name in f.keys()}
