"""New weights re-laid into a running model's served state on its devices, with no new
step program: the served layout (fused projections, int8 or FP8 where served, a GGUF
file's block forms, the native kernels' blocks, stacked or per-layer arrays) is made by one
jitted function from the checkpoint's layout, with each output placed as the state it replaces is, so the step
executables compiled for that state take the new one as they took the old.

The relayout compiles once per form of input (tensor names, or the loader's tree, in their
dtypes) and is reused by every later update. What a trainer does not hold stays as served:
the LoRA adapter slots and the factors derived from the config (GGUF's rope_freqs).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.layer_forms import LayerForms, RowParts
from engine.device.native.ops import PackedWeight
from engine.device.integer_weight import Int8Weight, quantize_into
from engine.device.weights import is_lora_slots, serving_weights
from engine.loader.named_weights import NAMED, checked_update, tree_of


class WeightRelayout:
    """The relayout of one runner (engine/device/runner.py): `new_state(params)`."""

    def __init__(self, runner) -> None:
        self.runner = runner
        # Where each leaf of the state lives, kept while its arrays may be let go (sleep).
        self.shardings = jax.tree.map(lambda leaf: leaf.sharding, runner.state)
        self._programs: dict[str, jax.stages.Wrapped] = {}  # by input form

    def new_state(self, params: Mapping) -> dict:
        """The served state for `params` (checked first: engine/loader/named_weights.py), the
        adapter slots and derived factors carried over from the state in use."""
        form, checked = checked_update(self.runner.model_config, params)
        program = self._programs.get(form)
        if program is None:
            program = self._programs[form] = self._program(form, checked)
        return kept_beside(program(checked), self.runner.state)

    def _program(self, form: str, example: dict):
        runner = self.runner

        gguf = runner.config.quantization == "gguf"
        forms = integer_forms(runner.state) if gguf else {}

        def relayout(weights: dict) -> dict:
            tree = tree_of(runner.model_config, weights) if form == NAMED else weights
            # Under gguf each weight is quantized into the form it is served in (a file's own
            # blocks: 4-bit with offsets, groups of 16, ...), so the steps take it as they are.
            quantization = "none" if gguf else runner.config.quantization
            served = serving_weights(runner.model_config, tree, runner.config.dtype, quantization)
            return runner.decoder.state_of(in_forms(served, forms))

        # Each output placed as the leaf it replaces is (sharded as served).
        shapes = jax.eval_shape(relayout, example)
        placed = jax.tree_util.tree_map_with_path(lambda path, _: leaf_at(self.shardings, path), shapes)
        return jax.jit(relayout, out_shardings=placed)


def integer_forms(state: dict) -> dict:
    """The (bits, groups, offsets, integer dots, scales' dtype, super-blocks of factors or 0)
    of each integer weight of a served state, by its place: name, or ("layers", name)."""
    def form(weight):  # a packed weight's scales are [..., blocks, groups, rows]
        supers = lambda factors, axis: 0 if factors is None else factors.shape[axis]
        if isinstance(weight, PackedWeight) and weight.scales is not None:
            dtype = "float32" if weight.scale_factors is not None else weight.scales.dtype.name  # not the integers'
            return (weight.bits, weight.scales.shape[-2], weight.mins is not None, weight.dots, dtype,
                    supers(weight.scale_factors, -2))
        if isinstance(weight, Int8Weight):
            return (weight.bits, weight.scales.shape[-1], weight.mins is not None, weight.integer_dots,
                    weight.scales.dtype.name, supers(weight.scale_factors, -1))
        if isinstance(weight, LayerForms):  # each form's, and the layers in it
            return weight.with_stacks(form(stack) for stack in weight.stacks)
        if isinstance(weight, RowParts):  # each part's rows and form
            return RowParts(parts=tuple((part.shape[-2], form(part)) for part in weight.parts))
        return None

    forms = {name: form(weight) for name, weight in state.items() if name != "layers"}
    forms.update({("layers", name): form(weight) for name, weight in state["layers"].items()})
    return {place: value for place, value in forms.items() if value is not None}


def in_forms(served: dict, forms: dict) -> dict:
    """The served weights with each one `forms` names quantized into its form."""
    def into(place, weight):
        form = forms.get(place)
        if isinstance(form, LayerForms):  # each form's layers quantized into it
            return form.with_stacks(quantized(weight[jnp.asarray(layers)], one)
                                    for layers, one in zip(form.layers, form.stacks))
        return weight if form is None else quantize_into(weight, *form)

    weights = {name: into(name, weight) for name, weight in served.items() if name != "layers"}
    weights["layers"] = {name: into(("layers", name), weight) for name, weight in served["layers"].items()}
    return weights


def quantized(weight, form):
    """`weight` quantized into `form`: one, or RowParts of (rows, form), its rows so split."""
    if not isinstance(form, RowParts):
        return quantize_into(weight, *form)
    ends = np.cumsum([rows for rows, _ in form.parts])
    return RowParts(parts=tuple(quantize_into(weight[..., end - rows:end, :], *one)
                                for end, (rows, one) in zip(ends, form.parts)))


def kept_beside(fresh: dict, served: dict) -> dict:
    """`fresh` with what `served` holds beyond it: the adapter slots, the config's factors."""
    state = {**{k: v for k, v in served.items() if k not in fresh}, **fresh}
    state["layers"] = {**fresh["layers"], **{k: v for k, v in served["layers"].items() if is_lora_slots(k)}}
    return state


def leaf_at(tree, path):
    """The leaf of `tree` at a key path of a tree of the same structure."""
    for key in path:
        if hasattr(key, "idx"):  # a tuple's (a LayerForms' stacks)
            tree = tree[key.idx]
        else:
            tree = tree[key.key] if hasattr(key, "key") else getattr(tree, key.name)
    return tree
