"""What the route handlers share: the served model, its engine and the server's phase."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from api.core.errors import generation_cut_off, model_not_found
from api.core.store import Store, store_url
from api.server.metrics import Metrics
from api.server.settings import Settings
from engine.async_engine import AsyncEngine
from engine.engine import EngineStats
from engine.loader.source import ModelSource
from engine.text.tokenizer import Tokenizer

if TYPE_CHECKING:
    from engine.async_encoder import AsyncEncoder
    from api.adapters.registry import AdapterRegistry
    from api.core.generation import Generation
    from engine.loader.lora import LoraAdapter

# "failed": the engine could not load, or its thread stopped on an error; `flint serve`
# exits (status 1), /health says so meanwhile.
Phase = Literal["starting", "ok", "draining", "failed"]


@dataclass
class ServerState:
    """Held in the Litestar app state under `server`."""

    model: ModelSource
    # As served: the engine's max_model_len already capped at the model's context length.
    settings: Settings = field(default_factory=Settings)
    phase: Phase = "starting"
    # Unix time the server started; OpenAI's model objects report it as `created`.
    started_at: int = field(default_factory=lambda: int(time.time()))
    # Set once the engine has loaded and compiled (phase "ok"); None while starting.
    engine: AsyncEngine | None = None
    # Labelled with the served model's id (the vLLM-named families' model_name).
    metrics: Metrics = field(init=False)
    # Stored chat completions and responses, where the settings say; opened at startup
    # (api/server/lifecycle.py), before the engine loads.
    store: Store = field(init=False)
    # Engine requests admitted by the API and not yet ended (api/core/admission.py), and of
    # those, the priority tier's.
    num_admitted_choices: int = 0
    num_admitted_priority: int = 0
    # The most bytes any one token stands for (set when the engine loads): text longer than
    # max_model_len times this cannot fit, whatever it tokenizes to.
    max_token_bytes: int = 0
    # Generations whose events are being read, and whether shutdown has cut them off: once
    # it has, every generation ends at once with an error (see `cut_off_generations`).
    open_generations: set[Generation] = field(default_factory=set)
    generations_cut_off: bool = False
    # The LoRA adapters served by name (api/adapters/registry.py); set once the engine has loaded.
    adapters: AdapterRegistry | None = None
    # The encoders served beside the chat model, by id (api/server/encoders.py); set once loaded.
    encoders: dict[str, AsyncEncoder] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics = Metrics(model_name=self.model.id)
        self.store = Store(store_url(self.settings.data_dir, self.settings.store_url))

    @property
    def max_model_len(self) -> int:
        """The longest sequence (prompt and output) this server accepts."""
        return self.settings.engine.max_model_len

    def engine_stats(self) -> EngineStats:
        """The engine's load now; requests posted to the engine thread but not yet queued
        in its scheduler count as waiting too."""
        if self.engine is None:
            return EngineStats(num_running=0, num_waiting=0, kv_cache_usage=0.0)
        stats = self.engine.engine.stats()
        # The priority tier's share likewise, from its admitted requests (api/core/admission.py).
        priority_waiting = max(stats.num_priority_waiting, self.num_admitted_priority - stats.num_priority_running)
        return replace(stats, num_waiting=max(stats.num_waiting, self.engine.num_in_flight - stats.num_running),
                       num_priority_waiting=priority_waiting)

    def cut_off_generations(self) -> int:
        """End every open generation, and any that starts later, with a 503 error (shutdown ran
        out of time, or the engine cannot go on). A stream ends with its dialect's error event
        rather than a cut connection, and the engine requests are aborted. Returns how many
        were open."""
        self.generations_cut_off = True
        open_now = list(self.open_generations)
        for generation in open_now:
            generation.break_off(generation_cut_off())
        return len(open_now)

    def with_served_model(self, raw: Any) -> Any:
        """The decoded body `raw`, with `model` set to the served model's id where the body
        leaves it out and this server serves exactly one model (no adapter loaded), as
        vLLM's and llama.cpp's servers do: curl examples often leave it out. With several
        models to choose from, a body without one stays its dialect's 400."""
        if not isinstance(raw, dict) or "model" in raw:
            return raw
        if self.adapters is not None and self.adapters.adapters:
            return raw
        return {**raw, "model": self.model.id}

    def require_model(self, model: str | None) -> LoraAdapter | None:
        """A request's `model` may be left out where its spec allows; given, it must name
        the served model, or a loaded adapter, which is returned (else 404 in the OpenAI shape)."""
        if model is None or model == self.model.id:
            return None
        adapter = self.adapters.get(model) if self.adapters is not None else None
        if adapter is None:
            raise model_not_found(model)
        return adapter

    @property
    def adapter_registry(self) -> AdapterRegistry:
        """The adapters; only called by handlers that run once the server is serving."""
        if self.adapters is None:
            raise RuntimeError("the engine is not running")
        return self.adapters

    @property
    def tokenizer(self) -> Tokenizer:
        return self.running_engine.engine.tokenizer

    @property
    def running_engine(self) -> AsyncEngine:
        """The engine; only called by handlers that run once the server is serving."""
        if self.engine is None:
            raise RuntimeError("the engine is not running")
        return self.engine
