"""What the route handlers share: the served model, its engine and the server's phase."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from engine.async_engine import AsyncEngine
from engine.loader.source import ModelSource
from engine.tokenizer import Tokenizer

Phase = Literal["starting", "ok", "draining"]


@dataclass
class ServerState:
    """Held in the Litestar app state under `server`."""

    model: ModelSource
    phase: Phase = "starting"
    # Unix time the server started; OpenAI's model objects report it as `created`.
    started_at: int = field(default_factory=lambda: int(time.time()))
    # Set once the engine has loaded and compiled (phase "ok"); None while starting.
    engine: AsyncEngine | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        return self.running_engine.engine.tokenizer

    @property
    def running_engine(self) -> AsyncEngine:
        """The engine; only called by handlers that run once the server is serving."""
        if self.engine is None:
            raise RuntimeError("the engine is not running")
        return self.engine
