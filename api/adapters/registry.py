"""The adapters a server serves, by the name requests pass as `model`.

Loading reads a PEFT directory on the server (engine/loader/lora.py) and checks that the
engine's slots can hold it (rank, adapted modules); the engine then writes it into a device
slot when a request first needs it, and evicts the least recently used one when the slots
are full (engine/host/adapters.py). Unloading drops the name: requests already admitted
under it finish with it, and later ones get a 404.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from api.core.errors import ApiError, invalid
from engine.config import EngineConfig, ModelConfig
from engine.device.lora import check_fits
from engine.loader.lora import LoraAdapter, load_lora


@dataclass
class AdapterRegistry:
    """Loaded adapters by name; safe to use from the event loop and its worker threads."""

    model: ModelConfig
    engine: EngineConfig
    base_id: str  # the served model's id, which no adapter may take
    adapters: dict[str, LoraAdapter] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str) -> LoraAdapter | None:
        return self.adapters.get(name)

    def load(self, name: str, path: str, replace: bool = False) -> LoraAdapter:
        """Read and check the adapter at `path`, and serve it as `name`; ApiError (400) naming
        the field at fault."""
        self.check_name(name, replace)
        try:
            adapter = load_lora(name, path, self.model)
            check_fits(adapter, self.model, self.engine)
        except (ValueError, OSError) as error:
            raise invalid("lora_path", f"The adapter at {path} cannot be served: {error}") from None
        with self._lock:
            if name in self.adapters and not replace:  # loaded by a concurrent request meanwhile
                raise already_loaded(name)
            self.adapters[name] = adapter
        return adapter

    def check_name(self, name: str, replace: bool) -> None:
        """400 naming `lora_name` for a name no adapter may take now."""
        if not self.engine.max_loras:
            raise invalid("lora_name", "This server has no LoRA adapter slots: start it with --max-loras N "
                                       "(or --lora NAME=PATH).")
        if name == self.base_id:
            raise invalid("lora_name", f"`{name}` is the base model's id; an adapter needs a name of its own.")
        if name in self.adapters and not replace:
            raise already_loaded(name)

    async def load_async(self, name: str, path: str, replace: bool = False) -> LoraAdapter:
        return await asyncio.to_thread(self.load, name, path, replace)

    def unload(self, name: str) -> None:
        with self._lock:
            if self.adapters.pop(name, None) is None:
                raise ApiError(404, f"No adapter named `{name}` is loaded.", param="lora_name",
                               code="model_not_found")


def already_loaded(name: str) -> ApiError:
    return invalid("lora_name", f"An adapter named `{name}` is already loaded (load_inplace replaces it).")
