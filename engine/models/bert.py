"""The BERT encoder family: what sentence-transformers' embedders and cross-encoder rerankers run.

Unlike the decoder families it needs no KV cache: every token attends to every other token
of its own text at once (bidirectional, padding masked), in one call. The layers are
post-norm (the residual sum, then LayerNorm), the feed-forward is GELU, and positions and
token types are learned embeddings added to the tokens'. Hugging Face's `BertModel` names
its tensors without a prefix, `BertForSequenceClassification` under `bert.`; both are read.

The weights pytree (`bert_weights`) keeps each layer's matrices stacked over the layers,
[layers, in, out] (Hugging Face's Linear is [out, in]), with q, k and v fused into one
product, so `encode` is one `lax.scan` over the layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from engine.models.pooling import Pooling, pool

HF_ARCHITECTURES = ("BertModel", "BertForSequenceClassification")
PREFIX = "bert."  # BertForSequenceClassification's encoder tensors


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    exact_gelu: bool = True  # "gelu" (erf); "gelu_new" and "gelu_pytorch_tanh" are the tanh form
    num_labels: int = 0  # a cross-encoder's classifier outputs (BertForSequenceClassification); 0: none

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


GELU_FORMS = {"gelu": True, "gelu_new": False, "gelu_pytorch_tanh": False, "gelu_fast": False}


def bert_config(config: Mapping) -> BertConfig:
    """A BERT config.json's features; ValueError for one this family does not run."""
    act = config.get("hidden_act", "gelu")
    if act not in GELU_FORMS:
        raise ValueError(f"BERT hidden_act {act!r} is not supported (one of {', '.join(GELU_FORMS)})")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"BERT position_embedding_type {config['position_embedding_type']!r} is not supported")
    return BertConfig(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                      num_layers=config["num_hidden_layers"], num_heads=config["num_attention_heads"],
                      intermediate_size=config["intermediate_size"],
                      max_positions=config["max_position_embeddings"],
                      type_vocab_size=config.get("type_vocab_size", 2),
                      layer_norm_eps=config.get("layer_norm_eps", 1e-12), exact_gelu=GELU_FORMS[act],
                      num_labels=num_labels(config))


def num_labels(config: Mapping) -> int:
    """A sequence classifier's outputs (its id2label's, as transformers counts them); 0 for a bare encoder."""
    if "BertForSequenceClassification" not in (config.get("architectures") or []):
        return 0
    return len(config["id2label"]) if config.get("id2label") else config.get("num_labels", 2)


# The weights pytree's layer entries: (Hugging Face name under encoder.layer.{i}., is a Linear weight).
LAYER_TENSORS = {
    "query": ("attention.self.query", True), "key": ("attention.self.key", True),
    "value": ("attention.self.value", True), "out": ("attention.output.dense", True),
    "attention_norm": ("attention.output.LayerNorm", False),
    "up": ("intermediate.dense", True), "down": ("output.dense", True),
    "mlp_norm": ("output.LayerNorm", False),
}


def bert_weights(tensors: Mapping[str, np.ndarray], config: BertConfig) -> dict:
    """The encoder's weights pytree from a checkpoint's tensors (by Hugging Face name, with
    or without `bert.`); KeyError naming the first tensor that is missing."""
    def read(name: str) -> np.ndarray:
        for key in (PREFIX + name, name):  # classifier.* has no prefix
            if key in tensors:
                return np.asarray(tensors[key], np.float32)
        raise KeyError(f"the BERT checkpoint has no tensor {name!r}")

    def layers(name: str, suffix: str, transpose: bool) -> np.ndarray:
        arrays = [read(f"encoder.layer.{i}.{name}.{suffix}") for i in range(config.num_layers)]
        return np.stack([a.T if transpose else a for a in arrays])

    def linear(name: str) -> dict:
        return {"weight": layers(name, "weight", True), "bias": layers(name, "bias", False)}

    def norm(name: str) -> dict:
        return {"scale": layers(name, "weight", False), "bias": layers(name, "bias", False)}

    stacked = {key: (linear if is_linear else norm)(name) for key, (name, is_linear) in LAYER_TENSORS.items()}
    separate = [stacked.pop(key) for key in ("query", "key", "value")]
    qkv = {part: np.concatenate([linear[part] for linear in separate], axis=-1) for part in ("weight", "bias")}
    head = {}
    if config.num_labels:  # BertForSequenceClassification: the pooler over [CLS], then the classifier
        head = {"pooler": {"weight": read("pooler.dense.weight").T, "bias": read("pooler.dense.bias")},
                "classifier": {"weight": read("classifier.weight").T, "bias": read("classifier.bias")}}
    return {**head, "word": read("embeddings.word_embeddings.weight"),
            "position": read("embeddings.position_embeddings.weight"),
            "token_type": read("embeddings.token_type_embeddings.weight"),
            "embedding_norm": {"scale": read("embeddings.LayerNorm.weight"), "bias": read("embeddings.LayerNorm.bias")},
            "layers": {"qkv": qkv, **stacked}}


def layer_norm(x: jax.Array, norm: dict, eps: float) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + eps) * norm["scale"] + norm["bias"]


def encode(weights: dict, config: BertConfig, token_ids: jax.Array, token_types: jax.Array,
           lengths: jax.Array) -> jax.Array:
    """The last layer's hidden states, [texts, tokens, hidden] float32, of `token_ids`
    [texts, tokens] (each text's first lengths[i] tokens; the rest padding, which no token
    attends to)."""
    num_tokens = token_ids.shape[1]
    x = weights["word"][token_ids] + weights["position"][:num_tokens][None] + weights["token_type"][token_types]
    x = layer_norm(x, weights["embedding_norm"], config.layer_norm_eps)
    keys_seen = jnp.arange(num_tokens)[None, :] < lengths[:, None]  # [texts, tokens]
    bias = jnp.where(keys_seen, 0.0, -jnp.inf)[:, None, None, :]  # [texts, 1, 1, keys]

    def layer(x, w):
        x = layer_norm(x + attention(x, w, bias, config), w["attention_norm"], config.layer_norm_eps)
        hidden = jax.nn.gelu(x @ w["up"]["weight"] + w["up"]["bias"], approximate=not config.exact_gelu)
        return layer_norm(x + hidden @ w["down"]["weight"] + w["down"]["bias"], w["mlp_norm"],
                          config.layer_norm_eps), None

    x, _ = jax.lax.scan(layer, x, weights["layers"])
    return x


def bert_forward(config: BertConfig, pooling: Pooling | None = None, activation: str | None = None):
    """The forward (weights, ids, types, lengths) of an embedder (each text pooled by
    `pooling`) or a cross-encoder (each pair scored through `activation`)."""
    def forward(weights: dict, ids: jax.Array, types: jax.Array, lengths: jax.Array) -> jax.Array:
        states = encode(weights, config, ids, types, lengths)
        if activation is not None:
            return relevance(classify(weights, states), activation)
        return pool(states, lengths, pooling)

    return forward


def classify(weights: dict, states: jax.Array) -> jax.Array:
    """A cross-encoder's logits, [texts, labels]: the classifier over the pooler's tanh of
    each text's first ([CLS]) state."""
    pooled = jnp.tanh(states[:, 0] @ weights["pooler"]["weight"] + weights["pooler"]["bias"])
    return pooled @ weights["classifier"]["weight"] + weights["classifier"]["bias"]


# sentence-transformers' CrossEncoder activations by the names its config.json stores.
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid", "torch.nn.modules.linear.Identity": "identity"}


def cross_encoder_activation(config: Mapping) -> str:
    """What turns a cross-encoder's one logit into its score: config.json's
    `sentence_transformers.activation_fn` (or the older `sbert_ce_default_activation_function`),
    else sentence-transformers' default for one label, the sigmoid. ValueError for another
    activation, or a classifier of other than one label."""
    labels = num_labels(config)
    if labels != 1:
        raise ValueError(f"a cross-encoder reranker needs num_labels 1, not {labels}")
    name = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function") or "torch.nn.modules.activation.Sigmoid"
    if name not in ACTIVATIONS:
        raise ValueError(f"cross-encoder activation_fn {name!r} is not supported ({', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def relevance(logits: jax.Array, activation: str) -> jax.Array:
    """Each text's score, [texts], from its one logit."""
    return jax.nn.sigmoid(logits[:, 0]) if activation == "sigmoid" else logits[:, 0]


def attention(x: jax.Array, w: dict, bias: jax.Array, config: BertConfig) -> jax.Array:
    """Every token over every unpadded token of its text: [texts, tokens, hidden]."""
    texts, tokens, _ = x.shape
    qkv = (x @ w["qkv"]["weight"] + w["qkv"]["bias"]).reshape(texts, tokens, 3, config.num_heads, config.head_dim)
    q, k, v = (qkv[:, :, part].transpose(0, 2, 1, 3) for part in range(3))  # [texts, heads, tokens, dim]
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(config.head_dim) + bias
    context = jax.nn.softmax(scores, axis=-1) @ v
    context = context.transpose(0, 2, 1, 3).reshape(texts, tokens, config.hidden_size)
    return context @ w["out"]["weight"] + w["out"]["bias"]
