"""New weights for a served model as a trainer holds them, checked before anything is
computed: the checkpoint's own tensor names (Hugging Face's, as in its safetensors files)
mapped to arrays, or the loader's tree (engine/models/params.py).

Every name, shape and dtype is checked against the model's config, and a mismatch is
refused by name: a weight update that silently dropped or broadcast a tensor would serve a
model nobody trained.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from engine.config import ModelConfig
from engine.loader.hf import bare_model_prefix
from engine.models import family_of
from engine.models.params import check_params, param_specs

TREE, NAMED = "tree", "named"  # the two forms an update comes in
# What a trainer holds its weights in; the served layout is made from any of them.
UPDATE_DTYPES = ("float32", "bfloat16", "float16")


def checked_update(config: ModelConfig, params: Mapping) -> tuple[str, dict]:
    """(TREE or NAMED, the weights as the relayout takes them), or ValueError naming the
    first tensor missing, unexpected, misshapen or of a dtype no trainer holds weights in."""
    if not isinstance(params, Mapping) or not params:
        raise ValueError("the new weights must be a non-empty mapping: tensor names to arrays, or the loader's tree")
    if isinstance(params.get("layers"), Mapping):
        check_params(config, params)
        tree = {**params, "layers": dict(params["layers"])}
        flat = {**{k: v for k, v in tree.items() if k != "layers"},
                **{f"layers/{k}": v for k, v in tree["layers"].items()}}
        _check_dtypes(flat)
        return TREE, tree
    named = _with_model_prefix(dict(params))
    _check_names(config, named)
    _check_dtypes(named)
    return NAMED, named


def tree_of(config: ModelConfig, named: dict) -> dict:
    """The loader's tree of checked NAMED weights, the layers stacked with jnp.stack (traceable)."""
    names = family_of(config).hf_tensors
    specs = param_specs(config)
    tree = {name: named[names.top[name]] for name in specs if name != "layers"}
    tree["layers"] = {name: names.stacked(named.__getitem__, name, config, stack=jnp.stack) for name in specs["layers"]}
    return tree


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name of `config`'s checkpoint (Hugging Face naming) and its shape."""
    names = family_of(config).hf_tensors
    specs = param_specs(config)
    shapes = {names.top[name]: spec.shape for name, spec in specs.items() if name != "layers"}
    for name, spec in specs["layers"].items():
        per_expert = names.per_expert(name)
        shape = spec.shape[2:] if per_expert else spec.shape[1:]  # one layer's (and expert's)
        for index in range(config.num_layers):
            shapes.update({tensor: shape for tensor in names.layer_names(name, index, config.num_experts)})
    return shapes


def _with_model_prefix(named: dict) -> dict:
    """Names as the causal LM's checkpoint has them, where they came as the bare model's."""
    prefix = bare_model_prefix(named)
    return {prefix + name: value for name, value in named.items()}


def _check_names(config: ModelConfig, named: dict) -> None:
    expected = expected_shapes(config)
    head = family_of(config).hf_tensors.top.get("lm_head")
    if head not in expected:  # a tied model's checkpoint may carry the head's copy of the embedding
        named.pop(head, None)
    for name in sorted(expected.keys() | named.keys()):
        if name not in named:
            raise ValueError(f"the new weights lack tensor {name}")
        if name not in expected:
            raise ValueError(f"the new weights have tensor {name}, which this model does not use")
        if tuple(np.shape(named[name])) != expected[name]:
            raise ValueError(f"tensor {name} has shape {tuple(np.shape(named[name]))}, expected {expected[name]}")


def _check_dtypes(flat: dict) -> None:
    for name, value in sorted(flat.items()):
        dtype = getattr(value, "dtype", None)
        if dtype is None or str(dtype) not in UPDATE_DTYPES:
            raise ValueError(f"tensor {name} has dtype {dtype}; new weights are {', '.join(UPDATE_DTYPES)}")


def named_of(config: ModelConfig, tree: dict) -> dict:
    """The loader's tree as the checkpoint's own tensor names (Hugging Face's), a tensor
    per layer (and expert): what a trainer holding a safetensors checkpoint has."""
    names = family_of(config).hf_tensors
    named = {names.top[name]: value for name, value in tree.items() if name != "layers"}
    for name, stack in tree["layers"].items():
        for index in range(config.num_layers):
            tensors = names.layer_names(name, index, config.num_experts)
            parts = [stack[index]] if len(tensors) == 1 and not names.per_expert(name) else list(stack[index])
            named.update(zip(tensors, parts))
    return named
