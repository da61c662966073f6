"""Server settings, filled from the `flint serve` command line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from engine.config import EngineConfig
from engine.device.encoder_runner import ROW_BUCKETS
from engine.device.multihost import Topology

MIB = 1024 * 1024
LOG_FORMATS = ("text", "json")  # --log-format (api/server/logs.py)
# Settings.compilation_cache's default: computed from data_dir (see default_compilation_cache).
_IN_DATA_DIR: Any = object()


def default_data_dir() -> str:
    """$FLINT_DATA_DIR, else $XDG_DATA_HOME/flint, else ~/.local/share/flint."""
    if os.environ.get("FLINT_DATA_DIR"):
        return os.environ["FLINT_DATA_DIR"]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "flint")


def default_compilation_cache(data_dir: str) -> str:
    """$JAX_COMPILATION_CACHE_DIR (JAX's own setting) where set, else compilation-cache in
    `data_dir`."""
    return os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(data_dir, "compilation-cache")


@dataclass(frozen=True)
class Settings:
    """What one server process serves, where, and the limits it enforces."""

    host: str = "127.0.0.1"
    port: int = 8000
    # A .gguf file, a Hugging Face directory, an Orbax checkpoint or a Hugging Face repo id in
    # the local cache; None serves the embedded SmolLM2.
    model: str | None = None
    # Fetch a repo id that is not in the Hugging Face cache (engine/loader/hub.py), instead of refusing it.
    download: bool = False
    engine: EngineConfig = EngineConfig()
    # When set, every /v1 request must carry it (Authorization: Bearer, or x-api-key), or
    # another of `api_keys` or `priority_api_keys` (api/server/auth.py).
    api_key: str | None = None
    api_keys: tuple[str, ...] = ()
    # Keys granted the priority service tier (each also a valid key). When any is set, a
    # request asking for priority with another key gets a 403 (api/core/tenancy.py).
    priority_api_keys: tuple[str, ...] = ()
    # "shared": requests share the prefix cache unless they name an isolation key;
    # "api-key": each API key has a cache of its own (api/core/tenancy.py).
    cache_isolation: str = "shared"
    # Generation requests queued beyond the running batch before new ones get a 429.
    max_waiting: int = 256
    # On SIGTERM: seconds to let in-flight requests finish before cancelling them.
    shutdown_timeout: float = 30.0
    # Larger request bodies get a 413 (a 128K-token prompt as JSON ids is about 1 MiB).
    max_body_bytes: int = 16 * MIB
    # Where the server keeps its state: the SQLite store (flint.db) unless store_url is set,
    # and the compilation cache.
    data_dir: str = field(default_factory=default_data_dir)
    # Where compiled XLA programs are kept, so that a restart loads them instead of compiling
    # (engine/device/compile_cache.py); None: nowhere. Default: default_compilation_cache(data_dir).
    compilation_cache: str | None = _IN_DATA_DIR
    # A SQLAlchemy async URL (postgresql+asyncpg://user:password@host/db) replacing the SQLite file.
    store_url: str | None = None
    # Parse special-token strings inside message content as control tokens (the old
    # behaviour); by default they are plain text, so no message can forge a role marker.
    allow_special_tokens_in_content: bool = False
    # How log lines are written: "text", or "json" (one object a line, with an access line per
    # request; api/server/logs.py).
    log_format: str = "text"
    # Several processes serving one model (api/server/multihost.py); None: this process alone.
    topology: Topology | None = None
    # Seconds without a follower's heartbeat before the leader stops serving.
    follower_timeout: float = 30.0
    # LoRA adapters loaded at start-up, as (name, directory) pairs (`--lora NAME=PATH`).
    lora_modules: tuple[tuple[str, str], ...] = ()
    # Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (`--allow-runtime-lora`).
    allow_runtime_lora: bool = False
    # Serve POST /v1/update_weights, /sleep, /wake_up and /reset_prefix_cache (`--allow-runtime-weights`).
    allow_runtime_weights: bool = False
    # Origins (scheme://host[:port], or "*") whose browser pages may call the API
    # (`--allowed-origins`; api/server/cors.py). None by default: same-origin pages only.
    allowed_origins: tuple[str, ...] = ()
    # Encoders served beside the chat model (api/server/encoders.py): `--embedding-model`
    # ("default": the embedded all-MiniLM-L6-v2, or a path) and `--rerank-model` (a path).
    embedding_models: tuple[str, ...] = ()
    rerank_models: tuple[str, ...] = ()
    # The batch sizes each encoder compiles (engine/device/encoder_runner.py); fewer compile
    # sooner (the tests' servers) and pad a mid-sized batch more.
    encoder_row_buckets: tuple[int, ...] = ROW_BUCKETS

    @property
    def valid_api_keys(self) -> tuple[str, ...]:
        """Every key that opens the API (none: the API is open)."""
        return tuple(dict.fromkeys(key for key in (self.api_key, *self.api_keys, *self.priority_api_keys) if key))

    def __post_init__(self) -> None:
        if self.compilation_cache is _IN_DATA_DIR:
            object.__setattr__(self, "compilation_cache", default_compilation_cache(self.data_dir))

    def served(self, context_length: int | None) -> Settings:
        """These settings with max_model_len capped at the model's context length (positions
        past what the model was trained on are not served)."""
        if context_length is None or self.engine.max_model_len <= context_length:
            return self
        return replace(self, engine=replace(self.engine, max_model_len=context_length))
