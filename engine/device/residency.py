"""What a runner holds on its devices, replaced or let go while it serves nothing: new
weights (engine/device/weight_update.py) and sleep, which releases the KV cache's memory
(level 1) and the weights' too (level 2) for a trainer that needs the accelerator.

Each operation is published to a multi-host group's followers (engine/device/multihost.py)
like a step: new weights travel as a checkpoint path on the shared filesystem, which every
process reads its share of; arrays given in this process are the leader's alone.
"""

from __future__ import annotations

import jax

from engine.device.kv_cache import init_kv_cache
from engine.device.native import NATIVE
from engine.device.weights import is_lora_slots

# Kept through a level-2 sleep: small, and not a trainer's (the factors derive from the config).
KEPT_ASLEEP = ("rope_freq_factors",)


class Residency:
    """ModelRunner's part that replaces and releases its device state."""

    def new_kv_cache(self):
        """A zeroed KV cache of this runner's layout (at start, and on waking from sleep)."""
        return init_kv_cache(self.model_config, self.config, self.mesh, self.per_layer_cache, self.kv_cache_dtype,
                             native=self.cpu_kernels == NATIVE)

    def replace_weights(self, params) -> None:
        """Serve `params` (engine/loader/named_weights.py's forms) from the next dispatch on.
        The engine calls it with nothing in flight: a step never mixes two weight versions."""
        if self.publish is not None:
            raise ValueError("a multi-host group takes new weights by path, which every process reads")
        self.state = self.relayout.new_state(params)

    def load_weights(self, path: str) -> None:
        """Serve the checkpoint at `path` (a safetensors folder, Orbax or GGUF) of this model."""
        from engine.loader.checkpoint import load_checkpoint
        from engine.loader.source import resolve_model

        self._publish(("load_weights", path))
        checkpoint = load_checkpoint(resolve_model(path))
        if checkpoint.config.family != self.model_config.family:
            raise ValueError(f"{path} holds a {checkpoint.config.family} model; this server serves "
                             f"a {self.model_config.family} one")
        self.state = self.relayout.new_state(checkpoint.params)

    def release_kv_cache(self) -> None:
        """Let the KV cache's device memory go (its pages' contents with it)."""
        self._publish(("release_kv_cache",))
        for leaf in jax.tree.leaves(self.kv_cache):
            leaf.delete()
        self.kv_cache = None

    def release_weights(self) -> None:
        """Let the weights' device memory go, but the adapter slots' and derived factors'
        (small, and not a trainer's): `load_weights` or `replace_weights` brings them back."""
        self._publish(("release_weights",))
        for leaf in jax.tree.leaves(released_part(self.state)):
            leaf.delete()

    def restore_kv_cache(self) -> None:
        self._publish(("restore_kv_cache",))
        self.kv_cache = self.new_kv_cache()


def released_part(state: dict) -> dict:
    """The part of a served state a level-2 sleep lets go."""
    part = {k: v for k, v in state.items() if k != "layers" and k not in KEPT_ASLEEP}
    part["layers"] = {k: v for k, v in state["layers"].items() if not is_lora_slots(k)}
    return part
