"""The served weights: the checkpoint's pytree (engine/models/params.py) prepared once for the step.

Two changes from the checkpoint layout, made at load time:
- **Fused projections.** q, k and v become one [q + 2 kv, hidden] matrix (`wqkv`), gate and
  up one [2 intermediate, hidden] matrix (`w_gate_up`): a step runs one matmul where it
  ran three and two, so XLA's CPU backend reads each token's activations once per matrix
  and pays its per-op overhead fewer times.
- **int8 quantization** (`EngineConfig.quantization == "int8"`): every projection of the
  layers is stored as int8 with one float32 scale per group of 64 inputs of each output
  row (symmetric: scale = max |w| / 127 over the group). A quarter of float32's bytes,
  which is what a one-token step is bound by. The step widens them to float32 as it
  multiplies (engine/models/layers.py `linear`): activations stay in float32.
- **FP8** (`quantization == "fp8"`): every projection of the layers as e4m3 with a scale
  per output row (engine/device/fp8.py), through XLA's FP8 product. A checkpoint published
  in FP8 (engine/loader/fp8_checkpoint.py) is served from its own values; served in
  another precision, it is widened first.

Why groups: one scale per row moved SmolLM2's top-1 prediction away from float32's at more
than 5% of the positions of tests/engine/test_quantization.py's text; so did int8
activations (s8 x s8 dots), at 12%. BENCHMARKS.md has the figures. The embedding and output
head keep the checkpoint's precision, except under the native CPU kernels, where they are
int8 in groups of 32 (HEAD_GROUP_SIZE, engine/models/llama.py). Norms, biases and RoPE
factors are small.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from engine.config import AUTO, INTEGER_QUANTIZATIONS, QUANTIZATIONS, ModelConfig
from engine.device.fp8 import Fp8Weight, default_per_token_activations, quantize_fp8
from engine.device import layer_forms
from engine.device.integer_weight import Int8Weight, alike, dequantize

# Served name -> the checkpoint names it concatenates (along the output rows), in order.
FUSED = {
    "wqkv": ("wq", "wk", "wv"),
    "bqkv": ("bq", "bk", "bv"),
    "w_gate_up": ("w_gate", "w_up"),
}
QUANTIZED_LAYER_WEIGHTS = ("wqkv", "wo", "w_gate_up", "w_down")

# The logical axes of each served weight (engine/device/sharding.py maps them onto the mesh).
SERVED_AXES = {
    "embed": ("vocab", "embed"),
    "lm_head": ("vocab", "embed"),
    "final_norm": (None,),
    "rope_freq_factors": (None,),
    "attn_norm": ("layers", None),
    "wqkv": ("layers", "heads", "embed"),
    "bqkv": ("layers", "heads"),
    "q_norm": ("layers", None),
    "k_norm": ("layers", None),
    "wo": ("layers", "embed", "heads"),
    "mlp_norm": ("layers", None),
    "w_gate_up": ("layers", "mlp", "embed"),
    "w_down": ("layers", "embed", "mlp"),
    "router": ("layers", None, "embed"),  # a mixture of experts (engine/models/moe.py)
    "we_gate": ("layers", "experts", "expert_mlp", "embed"),
    "we_up": ("layers", "experts", "expert_mlp", "embed"),
    "we_down": ("layers", "experts", "embed", "expert_mlp"),
}


GROUP_SIZE = 64  # inputs sharing one scale; a row whose width it does not divide is one group
# The head's groups under the native CPU kernels (engine/models/llama.py): GGUF's Q8_0 blocks
# are 32 inputs with one scale whose largest value is ±127, so a Q8_0 head (the embedded
# SmolLM2's) is held exactly, in half of bfloat16's bytes. A head of 64-input groups moved
# SmolLM2's top-1 prediction at 4.1% of the quality text's positions (BENCHMARKS.md).
HEAD_GROUP_SIZE = 32


def group_size(width: int, group: int = GROUP_SIZE) -> int:
    return group if width % group == 0 else width


@partial(jax.jit, static_argnames="group")
def quantize_int8(matrix, group: int = GROUP_SIZE) -> Int8Weight:
    """Symmetric int8 per `group` inputs: each group's largest magnitude maps to 127."""
    width = matrix.shape[-1]
    group = group_size(width, group)
    groups = matrix.astype(jnp.float32).reshape(*matrix.shape[:-1], width // group, group)
    scales = jnp.max(jnp.abs(groups), axis=-1) / 127.0
    safe = jnp.where(scales > 0, scales, 1.0)
    values = jnp.clip(jnp.round(groups / safe[..., None]), -127, 127).astype(jnp.int8)
    return Int8Weight(values=values.reshape(matrix.shape), scales=scales)


def concatenated(weights: list, axis: int):
    """`weights` (arrays or Int8Weights) concatenated along `axis`, leaf by leaf; stacks of
    several forms (engine/device/layer_forms.py) layer by layer, then stacked by form, a
    layer's parts of different forms side by side."""
    if layer_forms.has_forms(weights):  # a layer's parts in several forms kept so (RowParts)
        fuse = lambda parts: concatenated(parts, axis - 1)
        fused = [layer_forms.joined([layer_forms.layer_of(weight, layer) for weight in weights], fuse)
                 for layer in range(weights[0].shape[0])]
        return layer_forms.stacked_layers([jax.device_get(weight) for weight in fused])
    return jax.tree.map(lambda *leaves: jnp.concatenate([jnp.asarray(leaf) for leaf in leaves], axis=axis),
                        *alike(weights))


def resolve_dtype(requested: str) -> str:
    """`requested`, or for "auto": float32 on a CPU backend (XLA's CPU dots are fastest in
    it), bfloat16 on accelerators (half the bytes a memory-bound step reads, and the
    attention kernel's type)."""
    if requested != AUTO:
        return requested
    return "float32" if jax.default_backend() == "cpu" else "bfloat16"


def resolve_quantization(requested: str, source_format: str, published: str = "none") -> str:
    """`requested`, or for "auto": the checkpoint's own FP8 where it was `published` in FP8;
    on a CPU backend, a GGUF checkpoint's own blocks (gguf: engine/loader/gguf_blocks.py);
    else none.

    A GGUF file's weights are usually stored at 8 bits or fewer already (the embedded
    SmolLM2 at 4), and a one-token CPU step is bound by the bytes of weights it reads: its
    own blocks are the fewest, and exactly the checkpoint's numbers (requantizing them to
    int8 moved them, and doubled the bytes). On GPUs and for float checkpoints, auto keeps
    the checkpoint's precision."""
    if requested != AUTO:
        return requested
    if published == "fp8":
        return "fp8"
    return "gguf" if jax.default_backend() == "cpu" and source_format == "gguf" else "none"


def fuse_layers(layers: dict) -> dict:
    """The layer weights with q/k/v (and their biases) and gate/up concatenated (an FP8
    checkpoint's values and scales alike: both run along the output rows; a GGUF file's
    blocks of different formats made one form first)."""
    fused = dict(layers)
    for served, parts in FUSED.items():
        if all(part in fused for part in parts):
            fused[served] = concatenated([fused.pop(part) for part in parts], axis=1)
    return fused


def serving_weights(config: ModelConfig, params: dict, dtype: str, quantization: str = "none") -> dict:
    """The served pytree for checkpoint `params` (host or device arrays), in `dtype`. Under
    gguf the layers' Int8Weights (a GGUF file's blocks) are served as they are, and a
    projection read as float32 (a type without a kernel) as int8."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, not {quantization!r}")
    blocks = quantization == "gguf"
    # A stack of several forms stays so only where the blocks are served as they are.
    layers = fuse_layers(params["layers"] if blocks else layer_forms.one_form_layers(params)["layers"])
    weights = {name: _served(value, dtype, False, blocks) for name, value in params.items() if name != "layers"}
    # A mixture of experts' experts stay in `dtype`.
    weights["layers"] = {name: _served(value, dtype, name in QUANTIZED_LAYER_WEIGHTS and quantization == "fp8",
                                       blocks) for name, value in layers.items()}
    if quantization in INTEGER_QUANTIZATIONS:
        for name in QUANTIZED_LAYER_WEIGHTS:
            if name in weights["layers"] and not isinstance(weights["layers"][name],
                                                            (Int8Weight, layer_forms.LayerForms)):
                weights["layers"][name] = quantize_int8(weights["layers"][name])
    return weights


def _served(value, dtype: str, fp8: bool, blocks: bool):
    """One checkpoint weight as served: e4m3 where `fp8` (a published FP8 weight as it is),
    a GGUF file's blocks as they are where `blocks`, else in `dtype` (a published FP8
    weight or a GGUF file's blocks widened)."""
    if fp8 and isinstance(value, Fp8Weight):
        return Fp8Weight(jnp.asarray(value.values), jnp.asarray(value.scales), default_per_token_activations())
    if isinstance(value, (Int8Weight, layer_forms.LayerForms)) and blocks:
        return jax.tree.map(jnp.asarray, value)
    if isinstance(value, Int8Weight) and not fp8:
        return dequantize(jax.tree.map(jnp.asarray, value), dtype)
    if fp8:
        return quantize_fp8(jnp.asarray(dequantize(value)), default_per_token_activations())  # from its values
    return dequantize(value, dtype) if isinstance(value, Fp8Weight) else jnp.asarray(value).astype(dtype)


def is_served_weight(name) -> bool:
    """Whether `name` (a key of the served pytree) names a weight, rather than a part of
    one (an int8 or FP8 weight's values or scales) or the layers' subtree."""
    return name in SERVED_AXES or str(name).endswith("norm") or is_lora_slots(name)


def is_lora_slots(name) -> bool:
    """A LoRA weight of the adapter slots (engine/device/lora.py): small, so replicated."""
    return str(name).startswith("lora_")


def served_axes(name: str) -> tuple[str | None, ...]:
    """Logical axes of a served weight; an int8 weight's scales [..., out, groups] have its axes.
    A layer norm a family adds (Gemma's post-norms) is replicated like the others."""
    if name not in SERVED_AXES and name.endswith("norm"):
        return ("layers", None)
    if is_lora_slots(name):
        return ("layers", None, None)
    return SERVED_AXES[name]

