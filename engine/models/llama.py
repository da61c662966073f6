"""The Llama family: Llama 2/3 and SmolLM2, and the decoder Qwen2, Qwen3 and Mistral share.

A pre-norm decoder: RMSNorm, attention with RoPE (optionally biased q/k/v, optionally
RMSNorm over each head of q and k), a residual add, RMSNorm, a SwiGLU MLP, a residual add.
The decoder's state holds the served weights (stacked over layers, with fused projections
and optionally int8, see engine/device/weights.py); calling it runs one forward over a
ragged batch and the paged KV cache. For jit, the runner splits the decoder from its state
and binds the traced state inside the jitted step (engine/models/decoder.py), so the step
stays a pure function of (weights, cache, batch).

Another family reuses this decoder by overriding its stages: `embed_tokens`, `norm`,
`layer`, `feed_forward`, `logits` (engine/models/gemma.py and moe.py do).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from engine.config import SCAN, UNROLLED, ModelConfig
from engine.device.batch import BatchInputs, table_slots
from engine.device.lora import RowAdapters, row_adapters
from engine.device import layer_forms
from engine.device.native import ops as native_ops
from engine.device.integer_weight import Int8Weight, dequantize
from engine.device.weights import HEAD_GROUP_SIZE, quantize_int8
from engine.models.decoder import Decoder
from engine.models.family import Family, ParamSpec, TensorNames
from engine.models.layers import (
    LayerLayout,
    linear,
    live_sequences,
    live_tokens,
    mlp,
    native_layer_weights,
    packed_for_native,
    project,
    project_qkv,
    replace_embeddings,
    rms_norm,
    rope_inv_freq,
)

FULL_ATTENTION = 2**30  # the window of a layer that sees every key, beside windowed layers

if TYPE_CHECKING:  # the cache's sharding reads the registry, which imports this module
    from engine.device.attention import Attention
    from engine.device.kv_cache import KVCache, LayerKVCache

    AnyKVCache = KVCache | LayerKVCache  # stacked, or a layer per array (engine/device/kv_cache.py)


class Llama(Decoder):
    """A Llama-family decoder over a paged KV cache, on the served weights of engine/device/weights.py."""

    def __init__(self, config: ModelConfig, weights: dict, attention: Attention, layer_loop: str = SCAN,
                 lora_slots: int = 0, native_linear: bool = False, lora_rank: int = 0, native_lora: bool = False):
        self.config = config
        # The int8 projections through the native CPU kernel (engine/device/native), under a scan.
        self.native_linear = native_linear and layer_loop == SCAN
        self.lora_slots = lora_slots  # LoRA adapter slots in the layers' weights (engine/device/lora.py)
        self.lora_rank = lora_rank  # of each slot
        self.native_lora = native_lora  # the slots in the native kernels' layout (engine/device/lora_native.py)
        self.attention = attention  # engine/device/attention: the reference, or a kernel for the backend
        self.layer_loop = layer_loop  # SCAN or UNROLLED (engine/models/layers.py layer_loop_for)
        self.compute_dtype = jnp.dtype(weights["final_norm"].dtype)  # the embedding may be a GGUF block format
        self.layout = LayerLayout(tuple(weights["layers"]), per_layer=layer_loop == UNROLLED)
        self.state = self.state_of(weights)

    def state_of(self, weights: dict) -> dict:
        """The state this decoder holds for served `weights` (their layers emptied as they are
        stored). Traceable: the runner's weight updates (engine/device/weight_update.py) run
        it under jit, on weights without the adapter slots, which they keep as they are.

        With int8 layers under the native kernels, the embedding and the head are kept in
        int8 with a scale per 32 inputs (HEAD_GROUP_SIZE: exact for a GGUF Q8_0 head, as the
        embedded SmolLM2's is): a quarter of float32's bytes for a one-token step's head to
        read, and no float32 copy of the embedding held. The quality gate
        (tests/engine/test_quantization.py) scores it as it scores a float32 head.
        Unquantized layers keep the checkpoint's precision throughout. Weights kept packed
        (engine/loader/served_cache.py `keep_packed`) are unpacked where the kernels are not used,
        and a stack of several forms (engine/device/layer_forms.py) made one."""
        if not self.native_linear:
            weights = layer_forms.one_form_layers(native_ops.unpacked_tree(weights))
        quantized = any(isinstance(weight, (Int8Weight, native_ops.PackedWeight, layer_forms.LayerForms))
                        for weight in weights["layers"].values())
        narrow = self.native_linear and quantized and self.compute_dtype == jnp.float32
        head = partial(narrow_head, narrow=narrow)
        layout = dataclasses.replace(self.layout, names=tuple(weights["layers"]))
        state = {"embed": head(weights["embed"]), "final_norm": weights["final_norm"],
                 "layers": layout.store(weights["layers"])}
        if "lm_head" in weights:
            state["lm_head"] = head(weights["lm_head"])
        if "rope_freq_factors" in weights:
            state["rope_freq_factors"] = weights["rope_freq_factors"]
        return packed_for_native(state, self.native_lora) if self.native_linear else state

    def __call__(self, kv_cache: AnyKVCache, batch: BatchInputs) -> tuple[jax.Array, AnyKVCache]:
        """Logits [seqs, vocab] (float32) at batch.logits_indices, and the updated cache."""
        hidden, kv_cache, _ = self.hidden_states(kv_cache, batch)
        return self.logits(hidden[batch.logits_indices], live_sequences(batch.token_rows)), kv_cache

    def hidden_states(self, kv_cache: AnyKVCache, batch: BatchInputs) -> tuple[jax.Array, AnyKVCache, jax.Array | None]:
        """Final hidden states [tokens, hidden] of every token, writing their K and V to the
        cache, and each token's routing [tokens, layers, experts per token] (int32) where
        the layers route to experts (None otherwise: `feed_forward`'s second value)."""
        x = replace_embeddings(self.embed_tokens(batch.token_ids), batch.embedding_rows, batch.embedding_token_index)
        slots = table_slots(batch.block_tables, batch.token_rows, batch.positions, kv_cache.page_size)
        adapters = row_adapters(self.config, batch.row_adapters, batch.token_rows, self.lora_slots, self.lora_rank)
        step = Step(batch, slots // kv_cache.page_size, slots % kv_cache.page_size, self.rope(), adapters)
        if self.layer_loop == SCAN:
            stacked = self.layout.stacked(self.state["layers"])
            live = live_tokens(batch.token_rows)

            def scanned(carry, weights):
                x, cache, index = carry
                if weights is None:  # the native kernels read the stacked weights at the index
                    weights = native_layer_weights(stacked, index, live)
                x, cache, routing = self.layer(x, cache, index, weights, step)
                return (x, cache, index + 1), routing

            (x, kv_cache, _), routing = jax.lax.scan(scanned, (x, kv_cache, jnp.int32(0)),
                                                     None if self.native_linear else stacked,
                                                     length=self.config.num_layers)
        else:
            routings, layers = [], self.state["layers"]
            for index in range(self.config.num_layers):  # each layer's weights, arrays of their own
                x, kv_cache, routing = self.layer(x, kv_cache, index, self.layout.layer(layers, index), step)
                routings.append(routing)
            routing = None if routings[0] is None else jnp.stack(routings)
        routing = None if routing is None else routing.transpose(1, 0, 2)  # [layers, tokens, k] -> by token
        return self.norm(x, self.state["final_norm"]), kv_cache, routing

    def embed_tokens(self, token_ids):
        embed = self.state["embed"]
        if isinstance(embed, native_ops.PackedWeight):  # the rows of an int8 head, widened
            return dequantize(native_ops.packed_rows(embed, token_ids), self.compute_dtype)
        if isinstance(embed, Int8Weight):
            return dequantize(Int8Weight(embed.values[token_ids], embed.scales[token_ids]), self.compute_dtype)
        return embed[token_ids].astype(self.compute_dtype)

    def rope(self):
        """RoPE's inverse frequencies [head_dim // 2]."""
        return rope_inv_freq(self.config, self.state.get("rope_freq_factors"))

    def norm(self, x, weight):
        return rms_norm(x, weight, self.config.rms_norm_eps)

    def layer(self, x, cache, index, weights: dict, step: Step):
        """One decoder layer over x [tokens, hidden]: (x, cache, routing) after it."""
        attn, cache = self.attend(self.norm(x, weights["attn_norm"]), cache, index, weights, step)
        x = x + project(attn, weights, "wo", step.adapters)
        out, routing = self.feed_forward(self.norm(x, weights["mlp_norm"]), weights, index, step)
        return x + out, cache, routing

    def feed_forward(self, h, weights: dict, index, step: Step):
        """The layer's MLP of the normed h [tokens, hidden] (SwiGLU), and the experts each
        token was routed to: None, a dense MLP has none (engine/models/moe.py has)."""
        return mlp(h, weights, adapters=step.adapters), None

    def attend(self, h, cache, index, weights: dict, step: Step, inv_freq=None, scale=None, softcap=None):
        """Self-attention of the normed h [tokens, hidden] over the cache, its K and V written
        first: ([tokens, heads * head_dim], cache). The layer's window (`window`) and
        `softcap` (tanh capping of the scores; None: off) go to the attention."""
        config = self.config
        inv_freq = step.inv_freq if inv_freq is None else inv_freq
        window = self.window(index)
        q, k, v = project_qkv(config, h, weights, step.batch.positions, inv_freq, self.norm, step.adapters)
        cache = cache.write(index, step.pages, step.offsets, k, v)
        k_cache, v_cache, cache_layer = cache.operands(index)
        scale = 1.0 / math.sqrt(config.head_dim) if scale is None else scale
        with jax.named_scope("attention"):  # named for profiles (tools/gpu/bench.py)
            features = {key: value for key, value in (("window", window), ("softcap", softcap)) if value is not None}
            attn = self.attention(q, k, v, k_cache, v_cache, cache_layer, step.batch, scale, **features)
        return attn.reshape(h.shape[0], -1), cache

    def window(self, index):
        """Layer `index`'s window, as many of the latest keys as it sees (traced under a scan);
        None where no layer has one."""
        windows = self.config.layer_windows
        if not any(windows):
            return None
        return jnp.asarray([window or FULL_ATTENTION for window in windows], jnp.int32)[index]

    def logits(self, hidden, live=None):
        """Logits of hidden [rows, hidden]; under the native kernels, of the first `live`
        rows only where given (the rest, a bucket's padding, zeros: ops.py `at_layer`)."""
        head = self.state.get("lm_head", self.state["embed"])
        if isinstance(head, native_ops.PackedWeight):
            head = native_ops.at_layer(head, 0, live)
        return linear(hidden, head).astype(jnp.float32)



def narrow_head(weight, narrow: bool):
    """An embedding or head as the state holds it: a GGUF file's own int8 blocks (Q8_0,
    Q6_K: engine/loader/gguf_blocks.py) as they are, or as they were kept packed; else,
    where `narrow`, int8 in groups of HEAD_GROUP_SIZE; else as it is."""
    if isinstance(weight, (Int8Weight, native_ops.PackedWeight)):
        return jax.tree.map(jnp.asarray, weight)
    return quantize_int8(weight, group=HEAD_GROUP_SIZE) if narrow else jnp.asarray(weight)

@dataclass(frozen=True)
class Step:
    """What every layer of one step shares."""

    batch: BatchInputs
    pages: jax.Array  # [tokens] i32: each token's cache page
    offsets: jax.Array  # [tokens] i32: its slot in the page
    inv_freq: jax.Array  # [head_dim // 2] f32: RoPE's inverse frequencies
    adapters: RowAdapters | None = None  # each token's LoRA slot (engine/device/lora.py); None: no slots


def llama_param_specs(config: ModelConfig) -> dict:
    """The shape and logical axes of every weight of a Llama-family `config`."""
    c = config
    layers = {
        "attn_norm": ParamSpec((c.num_layers, c.hidden_size), ("layers", None)),
        "wq": ParamSpec((c.num_layers, c.q_size, c.hidden_size), ("layers", "heads", "embed")),
        "wk": ParamSpec((c.num_layers, c.kv_size, c.hidden_size), ("layers", "kv_heads", "embed")),
        "wv": ParamSpec((c.num_layers, c.kv_size, c.hidden_size), ("layers", "kv_heads", "embed")),
        "wo": ParamSpec((c.num_layers, c.hidden_size, c.q_size), ("layers", "embed", "heads")),
        "mlp_norm": ParamSpec((c.num_layers, c.hidden_size), ("layers", None)),
        "w_gate": ParamSpec((c.num_layers, c.intermediate_size, c.hidden_size), ("layers", "mlp", "embed")),
        "w_up": ParamSpec((c.num_layers, c.intermediate_size, c.hidden_size), ("layers", "mlp", "embed")),
        "w_down": ParamSpec((c.num_layers, c.hidden_size, c.intermediate_size), ("layers", "embed", "mlp")),
    }
    if c.attention_bias:
        layers["bq"] = ParamSpec((c.num_layers, c.q_size), ("layers", "heads"))
        layers["bk"] = ParamSpec((c.num_layers, c.kv_size), ("layers", "kv_heads"))
        layers["bv"] = ParamSpec((c.num_layers, c.kv_size), ("layers", "kv_heads"))
    if c.qk_norm:
        layers["q_norm"] = ParamSpec((c.num_layers, c.head_dim), ("layers", None))
        layers["k_norm"] = ParamSpec((c.num_layers, c.head_dim), ("layers", None))
    specs = {
        "embed": ParamSpec((c.vocab_size, c.hidden_size), ("vocab", "embed")),
        "final_norm": ParamSpec((c.hidden_size,), (None,)),
        "layers": layers,
    }
    if not c.tie_word_embeddings:
        specs["lm_head"] = ParamSpec((c.vocab_size, c.hidden_size), ("vocab", "embed"))
    return specs


HF_TENSORS = TensorNames(
    top={"embed": "model.embed_tokens.weight", "final_norm": "model.norm.weight", "lm_head": "lm_head.weight"},
    layer={
        "attn_norm": "model.layers.{i}.input_layernorm.weight",
        "wq": "model.layers.{i}.self_attn.q_proj.weight",
        "wk": "model.layers.{i}.self_attn.k_proj.weight",
        "wv": "model.layers.{i}.self_attn.v_proj.weight",
        "wo": "model.layers.{i}.self_attn.o_proj.weight",
        "bq": "model.layers.{i}.self_attn.q_proj.bias",
        "bk": "model.layers.{i}.self_attn.k_proj.bias",
        "bv": "model.layers.{i}.self_attn.v_proj.bias",
        "q_norm": "model.layers.{i}.self_attn.q_norm.weight",
        "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
        "mlp_norm": "model.layers.{i}.post_attention_layernorm.weight",
        "w_gate": "model.layers.{i}.mlp.gate_proj.weight",
        "w_up": "model.layers.{i}.mlp.up_proj.weight",
        "w_down": "model.layers.{i}.mlp.down_proj.weight",
    })

GGUF_TENSORS = TensorNames(
    top={"embed": "token_embd.weight", "final_norm": "output_norm.weight", "lm_head": "output.weight",
         "rope_freq_factors": "rope_freqs.weight"},
    layer={
        "attn_norm": "blk.{i}.attn_norm.weight",
        "wq": "blk.{i}.attn_q.weight",
        "wk": "blk.{i}.attn_k.weight",
        "wv": "blk.{i}.attn_v.weight",
        "wo": "blk.{i}.attn_output.weight",
        "bq": "blk.{i}.attn_q.bias",
        "bk": "blk.{i}.attn_k.bias",
        "bv": "blk.{i}.attn_v.bias",
        "q_norm": "blk.{i}.attn_q_norm.weight",
        "k_norm": "blk.{i}.attn_k_norm.weight",
        "mlp_norm": "blk.{i}.ffn_norm.weight",
        "w_gate": "blk.{i}.ffn_gate.weight",
        "w_up": "blk.{i}.ffn_up.weight",
        "w_down": "blk.{i}.ffn_down.weight",
    })


def refuse_extra_biases(c: dict, architecture: str) -> None:
    """Llama's attention_bias also biases o_proj, and mlp_bias the MLP: the layout has no
    place for either."""
    if c.get("attention_bias"):
        raise ValueError(f"{architecture} with attention_bias=true is not supported")
    if c.get("mlp_bias"):
        raise ValueError(f"{architecture} with mlp_bias=true is not supported")


def llama_hf_features(c: dict, architecture: str) -> dict:
    refuse_extra_biases(c, architecture)
    return {}


LLAMA = Family(
    name="llama", decoder=Llama, param_specs=llama_param_specs,
    hf_architectures=("LlamaForCausalLM",), hf_tensors=HF_TENSORS, hf_features=llama_hf_features,
    # llama.cpp converts Mistral as llama too.
    gguf_architectures=("llama",), gguf_tensors=GGUF_TENSORS, gguf_permuted_qk=("llama",),
)


def hf_layer_windows(c: dict, sliding: Callable[[int], bool]) -> dict:
    """ModelConfig.layer_windows of a config.json: its `layer_types` where it has them
    (transformers writes them since 4.53), else `sliding(layer)`; 0 for a full layer."""
    window = int(c.get("sliding_window") or 0)
    types = c.get("layer_types")
    flags = ([kind == "sliding_attention" for kind in types] if types
             else [sliding(layer) for layer in range(c["num_hidden_layers"])])
    windows = tuple(window if flag else 0 for flag in flags)
    return {"layer_windows": windows} if any(windows) else {}
