"""Write tiny checkpoints, as Hugging Face and llama.cpp would, from a weights pytree.

Written independently of engine/loader: the name tables below are the inverse mappings
spelled out from the formats' documentation, so a loader bug is not mirrored here.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from engine.config import ModelConfig

HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                    "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM",
                    "gemma2": "Gemma2ForCausalLM", "gemma3": "Gemma3ForCausalLM",
                    "qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM"}
GEMMA = ("gemma2", "gemma3")
# The names of a layer's experts: the router, then each expert's gate, up and down, per format.
HF_EXPERTS = {
    "qwen3_moe": ("mlp.gate.weight", "mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight",
                  "mlp.experts.{e}.down_proj.weight"),
    "mixtral": ("block_sparse_moe.gate.weight", "block_sparse_moe.experts.{e}.w1.weight",
                "block_sparse_moe.experts.{e}.w3.weight", "block_sparse_moe.experts.{e}.w2.weight"),
}
GGUF_ARCHITECTURES = {"qwen3_moe": "qwen3moe", "mixtral": "llama"}  # llama.cpp writes Mixtral as a llama


def hf_config_json(config: ModelConfig, arch: str) -> dict:
    """config.json as transformers writes it for `config`."""
    c = config
    document = {
        "architectures": [HF_ARCHITECTURES[arch]],
        "model_type": arch,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": (c.eos_token_ids[0] if len(c.eos_token_ids) == 1
                         else list(c.eos_token_ids)),
        "torch_dtype": "float32",
    }
    if arch in GEMMA:
        document.update(gemma_config_json(c, arch))
    elif arch == "mistral":  # one window for every layer
        document["sliding_window"] = max(c.layer_windows, default=0) or None
    elif arch == "qwen3_moe":
        document.update(num_experts=c.num_experts, num_experts_per_tok=c.num_experts_per_tok,
                        moe_intermediate_size=c.moe_intermediate_size, norm_topk_prob=c.norm_topk_prob,
                        decoder_sparse_step=1, mlp_only_layers=[])
    elif arch == "mixtral":  # its intermediate_size is each expert's
        document.update(num_local_experts=c.num_experts, num_experts_per_tok=c.num_experts_per_tok,
                        intermediate_size=c.moe_intermediate_size)
    if c.rope_scaling is not None and c.rope_scaling.kind == "linear":
        document["rope_scaling"] = {"rope_type": "linear", "factor": c.rope_scaling.factor}
    elif c.rope_scaling is not None:
        s = c.rope_scaling
        document["rope_scaling"] = {
            "rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }
    return document


def gemma_config_json(c: ModelConfig, arch: str) -> dict:
    """Gemma 2 / 3's own keys, as transformers writes them (layer_types since 4.53)."""
    document = {"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": c.query_pre_attn_scalar,
                "sliding_window": max(c.layer_windows, default=0) or None,
                "layer_types": ["sliding_attention" if window else "full_attention" for window in c.layer_windows]}
    if arch == "gemma2":
        document.update(attn_logit_softcapping=c.attn_logit_softcapping,
                        final_logit_softcapping=c.final_logit_softcapping)
    else:
        document.update(rope_local_base_freq=c.rope_local_theta, attn_logit_softcapping=None,
                        final_logit_softcapping=None, model_type="gemma3_text")
    return document


def hf_tensors(config: ModelConfig, params: dict) -> dict[str, np.ndarray]:
    """The state dict of a transformers model (PyTorch Linear weights are [out, in], as ours)."""
    tensors = {"model.embed_tokens.weight": params["embed"],
               "model.norm.weight": params["final_norm"]}
    if not config.tie_word_embeddings:
        tensors["lm_head.weight"] = params["lm_head"]
    layers = params["layers"]
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = layers["attn_norm"][i]
        if "post_attn_norm" in layers:  # Gemma: a norm before and after each block
            tensors[p + "post_attention_layernorm.weight"] = layers["post_attn_norm"][i]
            tensors[p + "pre_feedforward_layernorm.weight"] = layers["mlp_norm"][i]
            tensors[p + "post_feedforward_layernorm.weight"] = layers["post_mlp_norm"][i]
        else:
            tensors[p + "post_attention_layernorm.weight"] = layers["mlp_norm"][i]
        for proj, name in (("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv"), ("o_proj", "wo")):
            tensors[p + f"self_attn.{proj}.weight"] = layers[name][i]
        if config.num_experts:
            tensors.update(expert_tensors(config, layers, i, p))
        else:
            for proj, name in (("gate_proj", "w_gate"), ("up_proj", "w_up"), ("down_proj", "w_down")):
                tensors[p + f"mlp.{proj}.weight"] = layers[name][i]
        if config.attention_bias:
            for proj, name in (("q_proj", "bq"), ("k_proj", "bk"), ("v_proj", "bv")):
                tensors[p + f"self_attn.{proj}.bias"] = layers[name][i]
        if config.qk_norm:
            tensors[p + "self_attn.q_norm.weight"] = layers["q_norm"][i]
            tensors[p + "self_attn.k_norm.weight"] = layers["k_norm"][i]
    return tensors


def expert_tensors(config: ModelConfig, layers: dict, i: int, prefix: str) -> dict[str, np.ndarray]:
    """Layer i's router and its experts' weights, one tensor per expert, as transformers keeps them."""
    router, gate, up, down = HF_EXPERTS[config.family]
    tensors = {prefix + router: layers["router"][i]}
    for e in range(config.num_experts):
        for pattern, name in ((gate, "we_gate"), (up, "we_up"), (down, "we_down")):
            tensors[prefix + pattern.format(e=e)] = layers[name][i][e]
    return tensors


def write_hf(directory: Path, config: ModelConfig, params: dict, arch: str,
             dtype: str = "float32", num_shards: int = 1, extra: dict | None = None,
             skip: tuple[str, ...] = ()) -> Path:
    """A Hugging Face model directory: config.json and one or `num_shards` safetensors files."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config_json(config, arch)))
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    tensors = {name: np.ascontiguousarray(array).astype(np_dtype)
               for name, array in {**hf_tensors(config, params), **(extra or {})}.items()
               if name not in skip}
    if num_shards == 1:
        save_file(tensors, directory / "model.safetensors")
        return directory
    names = sorted(tensors)
    weight_map = {}
    for shard in range(num_shards):
        file = f"model-{shard + 1:05d}-of-{num_shards:05d}.safetensors"
        part = names[shard::num_shards]
        save_file({name: tensors[name] for name in part}, directory / file)
        weight_map.update({name: file for name in part})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def llama_cpp_permute(rows: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf does to Q and K rows for architecture llama:
    within each head, the first and second halves are interleaved."""
    half = rows.shape[0] // num_heads // 2
    return rows.reshape(num_heads, 2, half, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def gguf_tensors(config: ModelConfig, params: dict, arch: str) -> dict[str, np.ndarray]:
    """GGUF tensors with numpy shapes as GGUFWriter takes them (PyTorch's [out, in])."""
    hf = hf_tensors(config, params)
    permute = GGUF_ARCHITECTURES.get(arch, arch) == "llama"
    tensors = {"token_embd.weight": params["embed"], "output_norm.weight": params["final_norm"]}
    if not config.tie_word_embeddings:
        tensors["output.weight"] = hf["lm_head.weight"]
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight" if arch in GEMMA else "ffn_norm.weight",
        "pre_feedforward_layernorm.weight": "ffn_norm.weight",
        "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    }
    for name, array in hf.items():
        if not name.startswith("model.layers.") or ".experts." in name or name.endswith(".gate.weight"):
            continue  # experts: below, as llama.cpp merges them
        i, rest = name.removeprefix("model.layers.").split(".", 1)
        if permute and rest.startswith("self_attn.q_proj"):
            array = llama_cpp_permute(array, config.num_heads)
        elif permute and rest.startswith("self_attn.k_proj"):
            array = llama_cpp_permute(array, config.num_kv_heads)
        tensors[f"blk.{i}.{names[rest]}"] = array
    for i in range(config.num_layers if config.num_experts else 0):
        layers = params["layers"]
        tensors[f"blk.{i}.ffn_gate_inp.weight"] = layers["router"][i]
        for suffix, name in (("gate", "we_gate"), ("up", "we_up"), ("down", "we_down")):
            tensors[f"blk.{i}.ffn_{suffix}_exps.weight"] = layers[name][i]  # [experts, out, in]
    if arch in GEMMA:  # llama.cpp's converter stores Gemma's norm weights plus one
        tensors = {name: array + 1 if name.endswith("norm.weight") else array for name, array in tensors.items()}
    return tensors


def add_family_keys(writer: gguf.GGUFWriter, c: ModelConfig, arch: str) -> None:
    """The metadata llama.cpp writes for the experts, Gemma's windows and caps, linear RoPE."""
    if c.num_experts:
        writer.add_expert_count(c.num_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
        if arch == "qwen3_moe":
            writer.add_expert_feed_forward_length(c.moe_intermediate_size)
    if arch in GEMMA:
        writer.add_sliding_window(max(c.layer_windows, default=0))
    if c.rope_scaling is not None and c.rope_scaling.kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(c.rope_scaling.factor)
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(c.attn_logit_softcapping)
        writer.add_final_logit_softcapping(c.final_logit_softcapping)


def write_gguf(path: Path, config: ModelConfig, params: dict, arch: str,
               qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
               skip: tuple[str, ...] = (), extra: dict | None = None, raw: tuple[dict, dict] | None = None) -> Path:
    """A GGUF file as llama.cpp would write it; matrices in `qtype`, vectors in F32; `raw`:
    (name -> a tensor's raw blocks [out, bytes], name -> its ggml type) added as they are."""
    writer = gguf.GGUFWriter(str(path), arch=GGUF_ARCHITECTURES.get(arch, arch))
    c = config
    writer.add_block_count(c.num_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_heads)
    writer.add_head_count_kv(c.num_kv_heads)
    writer.add_key_length(c.head_dim)
    writer.add_value_length(c.head_dim)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_freq_base(c.rope_theta)
    writer.add_vocab_size(c.vocab_size)
    writer.add_bos_token_id(c.bos_token_id)
    writer.add_eos_token_id(c.eos_token_ids[0])
    add_family_keys(writer, c, arch)
    tensors = {**gguf_tensors(config, params, arch), **(extra or {})}
    for name, array in tensors.items():
        if name in skip:
            continue
        array = np.ascontiguousarray(array, dtype=np.float32)
        if array.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, array)
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    for name, blocks in (raw or ({}, {}))[0].items():
        writer.add_tensor(name, blocks, raw_dtype=raw[1][name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
