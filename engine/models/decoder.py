"""What a model family's forward pass is to the runner: its code and static configuration in
the object, its arrays in `state`, the pytree a jitted step takes as its argument.

Flax's nnx did this split before; the four parts of it the engine used (a module, its
parameters, split and merge) cost a server's start 0.3 s of imports (nnx brings Linen, optax
and treescope) and 16 MiB, for what a dict of arrays does as a JAX pytree."""

from __future__ import annotations

import copy


class Decoder:
    """A forward pass over `state`: a dict of arrays, dicts and Int8Weights
    (engine/device/weights.py), the only part of a model a jitted step traces. The runner
    keeps the decoder without its state (`split`) and binds each step's traced state to a
    copy of it (`bound`), so that the step is a pure function of (weights, cache, batch);
    the plain attributes (the configuration, the attention) are constants of its programs."""

    state: dict | None = None

    def split(self) -> tuple[Decoder, dict]:
        """This decoder without its arrays, and the arrays."""
        return self.bound(None), self.state

    def bound(self, state: dict | None) -> Decoder:
        """A shallow copy of this decoder over `state`."""
        model = copy.copy(self)
        model.state = state
        return model
