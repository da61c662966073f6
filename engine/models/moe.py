"""Mixtures of experts: Qwen3-MoE and Mixtral, the Llama decoder (engine/models/llama.py)
with each layer's MLP replaced by experts.

Each token's router logits (h @ router.T) go through a float32 softmax over the experts;
the top num_experts_per_tok are picked (a tie goes to the lower expert, as lax.top_k
breaks it) and, with norm_topk_prob, their weights renormalized to sum to one. The token's
output is the weighted sum of its experts' SwiGLU MLPs.

Three forms of the experts' products, one result (`experts_mlp` picks by measurement,
BENCHMARKS.md "Issue 25 [3/6]: the experts' products", on the CPU and on an H100):
- `grouped`: one grouped matmul (`jax.lax.ragged_dot_general`), the (token, pick) pairs
  sorted by expert, each expert's weights applied to its contiguous group. TPUs, where
  JAX lowers it to its grouped kernel (unmeasured: no TPU has been lent). It was the
  slowest form at every size measured, on XLA's CPU backend and on an H100 (7 times
  dense's time at 2,048 tokens of Qwen3-30B-A3B's shape).
- `gathered`: each token's picked experts' weights gathered and applied: it reads only
  the picked experts. One-token steps (a single stream's decode): 4 times faster than
  dense on an H100, 7 times on the CPU.
- `dense`: every expert on every token, weighted by the routing (zero where not
  picked). Every other step: it reads each expert once, and its wasted products
  (experts / picked of them) cost less than the other forms' gathers and sorts.
Expert weights stay in the [experts, out, in] layout every loader gives. Under tensor
parallelism the experts split over the devices where their count divides (engine/device/
sharding.py "experts"), else their hidden units do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.config import ModelConfig
from engine.models.family import Family, MetadataGetter, ParamSpec, TensorNames
from engine.models.layers import linear
from engine.models.llama import GGUF_TENSORS, HF_TENSORS, Llama, Step, llama_param_specs, refuse_extra_biases

DENSE_MLP = ("w_gate", "w_up", "w_down")
# Contract a [tokens, in] group with an [experts, out, in] weight on `in`: no transpose.
EXPERT_DOT = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([1], [2]), ([], [])),
                                               lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])


class MixtureOfExperts(Llama):
    """A Llama decoder whose MLPs are experts picked per token by a router."""

    def feed_forward(self, h, weights: dict, index, step: Step):
        """The experts' output, and each token's experts [t, k] in this layer: the
        router's pick, or the batch's replayed one (`forced_experts`, -1: none)."""
        return experts_mlp(h, weights, self.config, step.batch.forced_experts[:, index])


def route(h, router, config: ModelConfig, forced=None):
    """Each token's experts [t, k] (int32) and their weights [t, k] (float32).

    `forced` [t, k] (int32) replays a routing (Rollout Routing Replay): where a token's
    row is not -1 its experts are those, weighted by the router's own probabilities of
    them (renormalized as the pick would be), so that the replayed token sees the same
    experts and the weights the live router gives them."""
    probs = jax.nn.softmax(linear(h, router).astype(jnp.float32), axis=-1)
    weights, experts = jax.lax.top_k(probs, config.num_experts_per_tok)
    experts = experts.astype(jnp.int32)
    if forced is not None:
        replayed = forced[:, :1] >= 0
        experts = jnp.where(replayed, forced, experts)
        weights = jnp.where(replayed, jnp.take_along_axis(probs, jnp.maximum(forced, 0), axis=1), weights)
    if config.norm_topk_prob:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return experts, weights


def experts_mlp(h, weights: dict, config: ModelConfig, forced=None):
    """The experts' output [t, hidden] for the normed h [t, hidden], in the form that
    measures best for the step's shape and the backend (the module's docstring), and the
    experts [t, k] each token went to (`forced`: a replayed routing, `route`)."""
    experts, expert_weights = route(h, weights["router"], config, forced)
    if jax.default_backend() == "tpu":
        form = grouped
    else:
        form = gathered if h.shape[0] == 1 else dense
    return form(h, weights, config, experts, expert_weights), experts


def gathered(h, weights: dict, config: ModelConfig, experts, expert_weights):
    def picked(name):  # [t, k, out, in]
        return weights[name][experts].astype(h.dtype)

    hidden = jax.nn.silu(jnp.einsum("th,tkih->tki", h, picked("we_gate"))) * jnp.einsum("th,tkih->tki", h,
                                                                                       picked("we_up"))
    return jnp.einsum("tki,tkhi,tk->th", hidden, picked("we_down"), expert_weights.astype(h.dtype))


def dense(h, weights: dict, config: ModelConfig, experts, expert_weights):
    rows = jnp.arange(h.shape[0])[:, None]
    mix = jnp.zeros((h.shape[0], config.num_experts), h.dtype).at[rows, experts].add(expert_weights.astype(h.dtype))
    gate, up, down = (weights[name].astype(h.dtype) for name in ("we_gate", "we_up", "we_down"))
    hidden = jax.nn.silu(jnp.einsum("th,eih->tei", h, gate)) * jnp.einsum("th,eih->tei", h, up)
    return jnp.einsum("tei,ehi->th", hidden * mix[:, :, None], down)


def grouped(h, weights: dict, config: ModelConfig, experts, expert_weights):
    picks = experts.reshape(-1)  # [t * k]: token i's picks at i*k .. i*k + k - 1
    order = jnp.argsort(picks, stable=True)
    tokens = order // config.num_experts_per_tok
    group_sizes = jnp.bincount(picks, length=config.num_experts).astype(jnp.int32)
    by_expert = h[tokens]  # [t * k, hidden], grouped by expert

    def expert_dot(x, weight):
        return jax.lax.ragged_dot_general(x, weight.astype(x.dtype), group_sizes, EXPERT_DOT)

    hidden = jax.nn.silu(expert_dot(by_expert, weights["we_gate"])) * expert_dot(by_expert, weights["we_up"])
    out = expert_dot(hidden, weights["we_down"])  # [t * k, hidden], in sorted order
    weighted = out * expert_weights.reshape(-1)[order][:, None].astype(out.dtype)
    return jnp.zeros_like(h).at[tokens].add(weighted)


def moe_param_specs(config: ModelConfig) -> dict:
    """Llama's weights with the MLP's replaced by the router and the stacked experts."""
    c = config
    specs = llama_param_specs(config)
    layers = {name: spec for name, spec in specs["layers"].items() if name not in DENSE_MLP}
    expert = (c.num_layers, c.num_experts, c.moe_intermediate_size, c.hidden_size)
    layers.update(
        router=ParamSpec((c.num_layers, c.num_experts, c.hidden_size), ("layers", None, "embed")),
        we_gate=ParamSpec(expert, ("layers", "experts", "expert_mlp", "embed")),
        we_up=ParamSpec(expert, ("layers", "experts", "expert_mlp", "embed")),
        we_down=ParamSpec((c.num_layers, c.num_experts, c.hidden_size, c.moe_intermediate_size),
                          ("layers", "experts", "embed", "expert_mlp")))
    return {**specs, "layers": layers}


def _without_dense_mlp(names: TensorNames, **experts: str) -> TensorNames:
    layer = {name: pattern for name, pattern in names.layer.items() if name not in DENSE_MLP}
    return TensorNames(top=names.top, layer={**layer, **experts})


QWEN3_MOE_HF = _without_dense_mlp(
    HF_TENSORS, router="model.layers.{i}.mlp.gate.weight",
    we_gate="model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
    we_up="model.layers.{i}.mlp.experts.{e}.up_proj.weight",
    we_down="model.layers.{i}.mlp.experts.{e}.down_proj.weight")
MIXTRAL_HF = _without_dense_mlp(
    HF_TENSORS, router="model.layers.{i}.block_sparse_moe.gate.weight",
    we_gate="model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight",
    we_up="model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
    we_down="model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight")
MOE_GGUF = _without_dense_mlp(
    GGUF_TENSORS, router="blk.{i}.ffn_gate_inp.weight", we_gate="blk.{i}.ffn_gate_exps.weight",
    we_up="blk.{i}.ffn_up_exps.weight", we_down="blk.{i}.ffn_down_exps.weight")


def qwen3_moe_hf_features(c: dict, architecture: str) -> dict:
    refuse_extra_biases(c, architecture)
    if c.get("mlp_only_layers") or int(c.get("decoder_sparse_step", 1)) != 1:
        raise ValueError(f"{architecture} with dense MLP layers among the experts (mlp_only_layers, "
                         "decoder_sparse_step) is not supported")
    return {"qk_norm": True, "num_experts": int(c["num_experts"]),
            "num_experts_per_tok": int(c["num_experts_per_tok"]),
            "moe_intermediate_size": int(c["moe_intermediate_size"]),
            "norm_topk_prob": bool(c.get("norm_topk_prob", True))}


def mixtral_hf_features(c: dict, architecture: str) -> dict:
    refuse_extra_biases(c, architecture)
    if c.get("sliding_window"):
        raise ValueError(f"{architecture} with a sliding window is not supported")
    return {"num_experts": int(c["num_local_experts"]), "num_experts_per_tok": int(c["num_experts_per_tok"]),
            "moe_intermediate_size": int(c["intermediate_size"]), "norm_topk_prob": True}


def moe_gguf_features(get: MetadataGetter, arch: str) -> dict:
    """The experts of a GGUF file: Qwen3-MoE states their size; a Mixtral (a llama with
    experts) uses feed_forward_length."""
    size = get("expert_feed_forward_length", None) or get("feed_forward_length", None)
    features = {"num_experts": int(get("expert_count", None)), "num_experts_per_tok": int(get("expert_used_count", None)),
                "moe_intermediate_size": int(size), "norm_topk_prob": True}
    return {**features, "qk_norm": True} if arch == "qwen3moe" else features


QWEN3_MOE = Family(
    name="qwen3_moe", decoder=MixtureOfExperts, param_specs=moe_param_specs, moe=True,
    hf_architectures=("Qwen3MoeForCausalLM",), hf_tensors=QWEN3_MOE_HF, hf_features=qwen3_moe_hf_features,
    gguf_architectures=("qwen3moe",), gguf_tensors=MOE_GGUF, gguf_features=moe_gguf_features,
)

MIXTRAL = Family(
    name="mixtral", decoder=MixtureOfExperts, param_specs=moe_param_specs, moe=True,
    hf_architectures=("MixtralForCausalLM",), hf_tensors=MIXTRAL_HF, hf_features=mixtral_hf_features,
    gguf_architectures=("llama",), gguf_tensors=MOE_GGUF, gguf_features=moe_gguf_features,
    gguf_permuted_qk=("llama",),
)
