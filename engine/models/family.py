"""What a model family declares, once, for the registry (engine/models/__init__.py).

A family is one forward pass (a Decoder, engine/models/decoder.py, over the served weights
and the paged KV cache) and everything a loader needs to build its weights pytree: the
features its ModelConfig takes from a Hugging Face config.json or from GGUF metadata, the tensor names
of both formats, and the shape and logical axes of each weight. The runner, the loaders
and sharding ask the registry for these; nothing else names a family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from engine.config import ModelConfig
from engine.device.integer_weight import alike
from engine.device.layer_forms import stacked_layers


@dataclass(frozen=True)
class ParamSpec:
    shape: tuple[int, ...]
    axes: tuple[str | None, ...]  # one logical axis name (or None: replicated) per dim


MetadataGetter = Callable[[str, Any], Any]  # GGUF `{arch}.{key}` with a default


def no_features(*_) -> dict:
    return {}


@dataclass(frozen=True)
class TensorNames:
    """A checkpoint format's tensor names for the weights pytree (engine/models/params.py):
    `top` for the unstacked weights, `layer` for the stacked ones, each a pattern with
    `{i}` for the layer index."""

    top: Mapping[str, str]
    layer: Mapping[str, str]

    def layer_name(self, name: str, index: int, expert: int | None = None) -> str:
        return self.layer[name].format(i=index, e=expert)

    def per_expert(self, name: str) -> bool:
        """Whether the format keeps `name` as a tensor per expert (`{e}` in its pattern), to
        be stacked over the experts, rather than as one [experts, ...] tensor."""
        return "{e}" in self.layer[name]

    def layer_names(self, name: str, index: int, num_experts: int) -> list[str]:
        """The tensors holding layer `index`'s `name`: one, or one per expert."""
        if self.per_expert(name):
            return [self.layer_name(name, index, expert) for expert in range(num_experts)]
        return [self.layer_name(name, index)]

    def stacked(self, read: Callable[[str], np.ndarray], name: str, config: ModelConfig,
                stack: Callable[[list], Any] | None = None) -> np.ndarray:
        """`name` read with `read(tensor)` and stacked over the layers (and each layer's
        experts, where the format keeps a tensor per expert) by `stack` (unless given, where a
        jitted caller stacks traced arrays with jnp.stack: `stacked_weights`, and over the
        layers a stack per form where a GGUF file's blocks come in several, engine/device/
        layer_forms.py `stacked_layers`)."""
        layers_stack = stack or (lambda layers: stacked_layers(layers, stacked_weights))  # a stack per form
        stack = stack or stacked_weights

        def one_layer(index: int) -> np.ndarray:
            arrays = [read(tensor) for tensor in self.layer_names(name, index, config.num_experts)]
            return stack(arrays) if self.per_expert(name) else arrays[0]

        return layers_stack([one_layer(i) for i in range(config.num_layers)])

    def expected(self, layer_weights: Iterable[str], config: ModelConfig) -> set[str]:
        """Every tensor name a checkpoint of `config` may hold, for its `layer_weights`."""
        return set(self.top.values()) | {tensor for i in range(config.num_layers) for name in layer_weights
                                         for tensor in self.layer_names(name, i, config.num_experts)}


@dataclass(frozen=True)
class Family:
    """One model family: its forward pass and how its checkpoints read."""

    name: str  # ModelConfig.family
    decoder: type  # a Decoder (engine/models/decoder.py): decoder(config, weights, attention, layer_loop)
    param_specs: Callable[[ModelConfig], dict]  # name -> ParamSpec, engine/models/params.py's layout
    hf_architectures: tuple[str, ...]  # config.json "architectures" entries it serves
    hf_tensors: TensorNames
    gguf_architectures: tuple[str, ...] = ()  # GGUF general.architecture values it serves
    gguf_tensors: TensorNames | None = None
    # ModelConfig fields beyond the shared ones: from config.json (the document and the
    # architecture entry), or from GGUF metadata (a getter and the GGUF architecture).
    # Either raises ValueError for a variant the forward pass cannot run.
    hf_features: Callable[[dict, str], dict] = no_features
    gguf_features: Callable[[MetadataGetter, str], dict] = no_features
    # GGUF architectures whose Q and K rows llama.cpp's converter permuted (loader/gguf.py).
    gguf_permuted_qk: tuple[str, ...] = ()
    moe: bool = False  # a mixture of experts: a GGUF file of its architecture states expert_count
    # What llama.cpp's converter added to every norm weight (Gemma's 1), taken off on load.
    gguf_norm_offset: float = 0.0
    # HF tensors some checkpoints carry that the model recomputes (loader/hf.py).
    hf_ignored_suffixes: tuple[str, ...] = field(default=("rotary_emb.inv_freq",))


def stacked_weights(weights: list):
    """Arrays, or quantized weights (an FP8 checkpoint's, engine/device/fp8.py; a GGUF
    file's blocks, made one form: engine/device/integer_weight.py `alike`), stacked along a new first
    axis, leaf by leaf."""
    weights = alike(weights)
    kinds = {type(weight) for weight in weights}
    if len(kinds) != 1:
        raise ValueError(f"a stacked weight mixes {', '.join(sorted(kind.__name__ for kind in kinds))}: "
                         "quantized in some layers and not in others")
    return jax.tree.map(lambda *leaves: np.ascontiguousarray(np.stack(leaves)), *weights)
