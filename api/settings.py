"""Server settings, filled from the `flint serve` command line."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import EngineConfig


@dataclass(frozen=True)
class Settings:
    """What one server process serves, and where."""

    host: str = "127.0.0.1"
    port: int = 8000
    # A .gguf file or a Hugging Face directory; None serves the embedded SmolLM2.
    model: str | None = None
    engine: EngineConfig = EngineConfig()
