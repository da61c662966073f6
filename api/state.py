"""What the route handlers share: the served model and the server's life-cycle phase."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from engine.loader.source import ModelSource

Phase = Literal["starting", "ok", "draining"]


@dataclass
class ServerState:
    """Held in the Litestar app state under `server`."""

    model: ModelSource
    phase: Phase = "starting"
    # Unix time the server started; OpenAI's model objects report it as `created`.
    started_at: int = field(default_factory=lambda: int(time.time()))
