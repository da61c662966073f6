"""From a model source to what an engine serves: the checkpoint (or, where an earlier start
kept them, its served weights and description: engine/loader/served_cache.py and kept.py),
its tokenizer, and the engine config resolved for it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from engine.config import EngineConfig
from engine.device.sharding import param_shardings
from engine.device.weights import resolve_dtype, resolve_quantization
from engine.loader import served_cache
from engine.loader.checkpoint import Checkpoint, load_checkpoint
from engine.loader.fp8_checkpoint import published_quantization
from engine.loader.kept import load_description, save_description
from engine.loader.source import ModelSource
from engine.loader.progress import Progress
from engine.text.tokenizer import Tokenizer


def served_config(config: EngineConfig, source: ModelSource) -> EngineConfig:
    """`config` with its dtype and quantization resolved for the checkpoint `source`."""
    quantization = resolve_quantization(config.quantization, source.format, published_quantization(source))
    return dataclasses.replace(config, quantization=quantization,
                               dtype=resolve_dtype(config.dtype))


def load_for_serving(source: ModelSource, config: EngineConfig, mesh, kept_in,
                     report: Callable[[str], None] | None = None,
                     progress: Progress | None = None) -> tuple[Checkpoint, Tokenizer, dict | None]:
    """The checkpoint (its params None where the served weights are given), its tokenizer,
    and its served weights where they were kept in `kept_in` (engine/loader/served_cache.py:
    mapped, with the description engine/loader/kept.py keeps, and no checkpoint read) or are
    to be kept there (made here and written); None where nothing is kept. `progress` is told
    the weights read, kept or from the checkpoint (engine/loader/progress.py)."""
    entry = served_cache.entry_for(kept_in, source, config, mesh)
    if entry is not None:
        served, description = served_cache.load(entry, progress), load_description(kept_in, source.path)
        if served is not None and description is not None:
            if report:
                report(f"the served weights and the model's description read from {kept_in}")
            checkpoint = Checkpoint(description.config, None, source, formats=served_cache.formats_of(entry))
            return checkpoint, description.tokenizer, served
    checkpoint = load_checkpoint(source, shardings=lambda c, p: param_shardings(c, mesh, p), progress=progress,
                                 blocks=config.quantization == "gguf")
    tokenizer = tokenizer_for(checkpoint)
    if entry is None:
        return checkpoint, tokenizer, None
    save_description(kept_in, source.path, source.context_length, checkpoint.config, tokenizer)
    checkpoint.kept_at = entry
    return checkpoint, tokenizer, served_cache.make_and_keep(checkpoint, config, entry)


def tokenizer_for(checkpoint: Checkpoint) -> Tokenizer:
    """The checkpoint's own tokenizer, reusing the parsed GGUF metadata where there is one.

    Hugging Face directories and Orbax checkpoints written by tools/convert.py hold a
    tokenizer.json with its tokenizer_config.json."""
    if checkpoint.source.format == "gguf":
        return Tokenizer.from_gguf(checkpoint.gguf_fields if checkpoint.gguf_fields is not None
                                   else checkpoint.source.path)
    return Tokenizer.from_hf_directory(checkpoint.source.path)
