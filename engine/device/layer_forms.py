"""A weight stacked over layers whose layers come in more than one form, each form a stack
of its own.

A GGUF Q4_K_M file keeps attn_v and ffn_down in Q6_K in some layers (llama-quantize gives
more bits to the first and last eighth and every third layer between) and in Q4_K in the
others. Made one form (engine/device/integer_weight.py `alike`), the Q4_K layers would be
served as 6-bit values with offsets in groups of 16: 7 bits a weight against the file's
4.5, and 8% more of a 1B model's bytes read a token. So a stack of a GGUF file's blocks
keeps a stack per form (`LayerForms`, made by `stacked_by_form`), and the native kernels'
scan over the layers multiplies by the stack the layer's form names (`LayerOfForms`: a
switch on the traced layer, engine/models/layers.py `linear`). A layer's fused q|k|v whose
parts are in several forms (a Q6_K attn_v beside Q4_K q and k) keeps each run of one form as
a part of its own (`RowParts`), multiplied part by part. Where the kernels do not read the
layers (another backend, a build without them, an unrolled loop), the stacks are made one
form again (`one_form`), as they were before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.integer_weight import Int8Weight, alike
from engine.device.native import ops as native_ops


@jax.tree_util.register_dataclass
@dataclass
class LayerForms:
    """A weight [layers, ...] held as a stack per form: `stacks[f]` (an Int8Weight, or a
    PackedWeight once packed for the native kernels) holds the layers `layers[f]`, in order."""

    stacks: tuple
    layers: tuple[tuple[int, ...], ...] = field(metadata=dict(static=True))

    @property
    def num_layers(self) -> int:
        return sum(len(layers) for layers in self.layers)

    @property
    def shape(self) -> tuple[int, ...]:
        """The stack's shape, as one form's would be: [layers, ..., out, in]."""
        return (self.num_layers, *self.stacks[0].shape[1:])

    def form_of(self, layer: int) -> int:
        return next(form for form, layers in enumerate(self.layers) if layer in layers)

    def layer(self, layer: int):
        """Layer `layer`'s weight, sliced out of its form's stack."""
        form = self.form_of(layer)
        return _sliced(self.stacks[form], self.layers[form].index(layer))

    def with_stacks(self, stacks) -> LayerForms:
        return LayerForms(stacks=tuple(stacks), layers=self.layers)


@jax.tree_util.register_dataclass
@dataclass
class RowParts:
    """A layer's fused matrix (q|k|v) whose parts are a GGUF file's blocks in different forms
    (Q4_K_M's Q6_K attn_v beside Q4_K attn_q and attn_k): its runs of rows, each in its own
    form, in order (`joined`); multiplied part by part, the outputs side by side. Made one
    form, q and k would be held in v's 6 bits with offsets."""

    parts: tuple

    @property
    def shape(self) -> tuple[int, ...]:
        *lead, _, width = self.parts[0].shape
        return (*lead, sum(part.shape[-2] for part in self.parts), width)


def joined(weights: list, concatenate):
    """A layer's parts (Int8Weights, rows on their first axis) fused: by `concatenate` where
    they are one form, else each run of one form so, as RowParts."""
    keys = [_form_key(weight, rows=False) for weight in weights]  # parts of one form, of any rows
    blocks = all(isinstance(weight, Int8Weight) and weight.integer_dots for weight in weights)
    if not blocks or len(set(keys)) == 1:
        return concatenate(weights)
    runs, start = [], 0
    for end in range(1, len(weights) + 1):
        if end == len(weights) or keys[end] != keys[start]:
            runs.append(concatenate(weights[start:end]) if end - start > 1 else weights[start])
            start = end
    return RowParts(parts=tuple(runs))


def matrices(stack) -> tuple:
    """A form's stack as its matrices: a RowParts' parts, or the stack itself."""
    return stack.parts if isinstance(stack, RowParts) else (stack,)


def each_matrix(function, stack):
    """`function` of each of a form's stack's matrices, as the stack was (RowParts, or one)."""
    if isinstance(stack, RowParts):
        return RowParts(parts=tuple(function(part) for part in stack.parts))
    return function(stack)


def _one_matrix(weight):
    """A layer's weight as one matrix: RowParts' parts made one form and concatenated."""
    if not isinstance(weight, RowParts):
        return weight
    xp = _array_module(weight)
    return jax.tree.map(lambda *leaves: xp.concatenate(leaves, axis=-2), *alike(list(weight.parts)))


def _sliced(stack, index: int):
    return jax.tree.map(lambda leaf: leaf[index], stack)


def _form_key(weight, rows: bool = True) -> tuple:
    """What weights of one form share: the same parts, of the same shapes (but for their rows,
    the second last axis, unless `rows`) and dtypes."""
    shape = lambda leaf: tuple(leaf.shape) if rows else (*leaf.shape[:-2], leaf.shape[-1])
    return jax.tree.structure(weight), tuple((shape(leaf), np.dtype(leaf.dtype)) for leaf in jax.tree.leaves(weight))


def _array_module(tree):
    """NumPy where `tree`'s leaves are host arrays (the loader's), else jax.numpy (traced or placed)."""
    return np if all(isinstance(leaf, np.ndarray) for leaf in jax.tree.leaves(tree)) else jnp


def _stacked(weights: list):
    """Weights of one form stacked on a new first axis, leaf by leaf."""
    xp = _array_module(weights)
    return jax.tree.map(lambda *leaves: xp.stack(leaves), *weights)


def several_forms(weights: list) -> bool:
    """Whether layers' `weights` are a GGUF file's blocks in more than one form (or in parts
    of several forms: RowParts, which only a stack per form holds)."""
    if any(isinstance(weight, RowParts) for weight in weights):
        return True
    blocks = all(isinstance(weight, Int8Weight) and weight.integer_dots for weight in weights)
    return blocks and len({_form_key(weight) for weight in weights}) > 1


def stacked_by_form(weights: list) -> LayerForms:
    """Layers' `weights` (of `several_forms`) as a stack per form, in the order they first appear."""
    keys = list(dict.fromkeys(_form_key(weight) for weight in weights))
    layers = tuple(tuple(i for i, weight in enumerate(weights) if _form_key(weight) == key) for key in keys)
    return LayerForms(stacks=tuple(_stacked([weights[i] for i in held]) for held in layers), layers=layers)


def stacked_layers(weights: list, one_form_stack=None):
    """Layers' weights stacked: by form where there are several (`stacked_by_form`), else by
    `one_form_stack` (default: made one form, `alike`, and stacked)."""
    if several_forms(weights):
        return stacked_by_form(weights)
    return one_form_stack(weights) if one_form_stack else _stacked(alike(weights))


def packed_stacks(weight: LayerForms, pack) -> LayerForms | None:
    """`weight` with each form's matrices packed by `pack` for the native kernels, or None
    where the kernels do not serve every one (a served cache's are packed already)."""
    kernels = (Int8Weight, native_ops.PackedWeight)
    if not all(isinstance(matrix, kernels) and native_ops.serves(matrix)
               for stack in weight.stacks for matrix in matrices(stack)):
        return None
    return weight.with_stacks(each_matrix(pack, stack) for stack in weight.stacks)


def layer_of(weight, layer: int):
    """Layer `layer` of a stacked weight, of one form or of several."""
    return weight.layer(layer) if isinstance(weight, LayerForms) else _sliced(weight, layer)


def one_form(weight):
    """A stack of one form for `weight`: its layers made one form (`alike`) where it is a
    LayerForms, else `weight` as it is."""
    if not isinstance(weight, LayerForms):
        return weight
    return _stacked(alike([_one_matrix(weight.layer(layer)) for layer in range(weight.num_layers)]))


def one_form_layers(state: dict) -> dict:
    """A decoder's state (or served weights) with every LayerForms of its layers made one form."""
    return {**state, "layers": {name: one_form(weight) for name, weight in state["layers"].items()}}


def has_forms(weights) -> bool:
    return any(isinstance(weight, LayerForms) for weight in weights)


@jax.tree_util.register_dataclass
@dataclass
class LayerOfForms:
    """One layer (traced, in the scan) of a LayerForms packed for the native kernels: each
    form's stack read at the layer's place in it, and the form the layer is in."""

    weights: tuple  # a NativeWeight per form (RowParts of them where the form is in parts)
    form: jax.Array  # int32 []

    @property
    def shape(self) -> tuple[int, ...]:
        return self.weights[0].shape


def at_layer(weight: LayerForms, index, live=None) -> LayerOfForms:
    """Layer `index` (traced) of a packed LayerForms: its form and its place in that form's
    stack, looked up in tables of the static layout (0 in the stacks it is not in, read by
    no branch but kept in range)."""
    forms = jnp.asarray([weight.form_of(layer) for layer in range(weight.num_layers)], jnp.int32)
    places = [jnp.asarray([held.index(layer) if layer in held else 0 for layer in range(weight.num_layers)],
                          jnp.int32) for held in weight.layers]
    read = lambda stack, place: each_matrix(lambda matrix: native_ops.at_layer(matrix, place, live), stack)
    return LayerOfForms(weights=tuple(read(stack, place[index]) for stack, place in zip(weight.stacks, places)),
                        form=forms[index])


def linear(x, weight: LayerOfForms):
    """x [tokens, in] times the layer's matrix in float32, by the kernel of its form: a
    switch runs that branch alone."""
    def product(x, one):
        if isinstance(one, RowParts):
            return jnp.concatenate([native_ops.linear(x, part) for part in one.parts], axis=-1)
        return native_ops.linear(x, one)

    branches = [lambda x, one=one: product(x, one) for one in weight.weights]
    return jax.lax.switch(weight.form, branches, x)
