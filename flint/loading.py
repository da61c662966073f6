"""What `LLM` and `AsyncLLM` share: a model loaded and compiled as `flint serve` loads it, or
an engine built already."""

from __future__ import annotations

from engine.config import AUTO, EngineConfig, default_num_pages
from engine.engine import Engine
from engine.host.heap import settle_after_load


class EngineHolder:
    """`model` as `flint serve --model` takes it (None: the embedded SmolLM2-135M-Instruct),
    the engine's options by their `flint serve` names (`max_model_len`, `max_num_seqs`,
    `dtype`, `quantization`, `kv_cache_dtype`, ...), `tensor_parallel_size` for the devices
    to split over. Unset options take `flint serve`'s defaults (on a CPU and a GGUF file:
    int8 weights through the native kernels). A subclass binds itself to the engine (`_bind`)."""

    def __init__(self, model: str | None = None, *, tensor_parallel_size: int = 1, download: bool = False,
                 **engine_options) -> None:
        self._bind(load_engine(model, tensor_parallel_size, download, engine_options))

    @classmethod
    def from_engine(cls, engine: Engine):
        """One over an engine already built (tests, tools, the `flint` commands)."""
        holder = cls.__new__(cls)
        holder._bind(engine)
        return holder

    def _bind(self, engine: Engine) -> None:
        raise NotImplementedError


def load_engine(model: str | None, tensor_parallel_size: int, download: bool, engine_options: dict) -> Engine:
    """The engine `LLM(...)` and `AsyncLLM(...)` serve, loaded and compiled."""
    from engine.loader.source import resolve_model

    config = EngineConfig(mesh_shape=(tensor_parallel_size,), **served_defaults(engine_options))
    engine = Engine.from_model(resolve_model(model, download), config)
    # As `flint serve` does: the loaded engine's objects frozen out of the cyclic collector's
    # walks, which otherwise took a third of a step's host time at 256 sequences
    # (engine/host/heap.py).
    settle_after_load()
    return engine


def served_defaults(options: dict) -> dict:
    """`options` with what `flint serve` chooses where they are silent: the quantization for
    the checkpoint and the backend (auto), and KV pages for an eighth of every sequence."""
    options = {"quantization": AUTO, **options}
    if "num_pages" not in options:
        defaults = EngineConfig()
        options["num_pages"] = default_num_pages(options.get("max_model_len", defaults.max_model_len),
                                                 options.get("max_num_seqs", defaults.max_num_seqs),
                                                 options.get("page_size", defaults.page_size))
    return options
