"""One entry point from a model argument to its config and weights, whatever the format."""

from __future__ import annotations

import gc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import ModelConfig
from engine.loader.source import ModelSource, resolve_model
from engine.models.params import check_params
from engine.loader.progress import Progress


@dataclass
class Checkpoint:
    """A loaded model: its static config, its weights pytree and where they came from.

    `params` follows engine/models/params.py: float32 NumPy arrays, or jax Arrays when loaded with
    shardings. `gguf_fields` keeps a GGUF file's parsed metadata (GGUFReader.fields), so
    the tokenizer can build itself from it without parsing the file a second time (about
    2 s for SmolLM2's vocabulary); it is None for other formats. `formats`: what a GGUF
    file's projections were read as where its blocks were kept (engine/loader/gguf_blocks.py).
    `kept_at`: where its served weights were written this start (engine/loader/served_cache.py),
    for the engine to write again packed; None where they were not.
    """

    config: ModelConfig
    params: dict
    source: ModelSource
    gguf_fields: Mapping[str, Any] | None = None
    formats: Any = None  # engine.loader.gguf_blocks.WeightFormats
    kept_at: Path | None = None


def load_checkpoint(source: ModelSource | str | Path | None = None,
                    shardings: Any = None, with_params: bool = True, progress: Progress | None = None,
                    blocks: bool = False) -> Checkpoint:
    """Load the checkpoint at `source`: a path, a resolved ModelSource, or None (the embedded model).

    Without `shardings` the weights are host NumPy arrays. With them (a pytree of Shardings
    matching the params, or a function (config, params as ShapeDtypeStructs) -> that pytree,
    such as `lambda c, p: engine.sharding.param_shardings(c, mesh, p)`), they are jax Arrays
    so placed: an Orbax checkpoint is read straight onto the devices, the other formats are
    loaded on the host first.
    Without `with_params` (the served weights are kept, engine/loader/served_cache.py) a
    GGUF or Hugging Face checkpoint's config and tokenizer metadata are read, its weights
    not, and `params` is None.
    `progress` is told the weights read (engine/loader/progress.py).
    `blocks`: a GGUF file's projections of the kept types as their own blocks
    (engine/loader/gguf_blocks.py: Int8Weights), the rest float32 (quantization gguf).
    Raises ValueError naming the architecture, setting or weight it cannot load.
    """
    if not isinstance(source, ModelSource):
        source = resolve_model(source)
    if source.format == "orbax":
        checkpoint = _load_orbax(source, shardings, progress)
    else:
        checkpoint = (_load_gguf(source, with_params, progress, blocks) if source.format == "gguf"
                      else _load_hf(source, with_params, progress))
    if checkpoint.params is None:
        return checkpoint
    check_params(checkpoint.config, checkpoint.params)
    if shardings is not None and source.format != "orbax":
        checkpoint.params = _place(checkpoint.config, checkpoint.params, shardings)
    return checkpoint


def _place(config: ModelConfig, params: dict, shardings: Any) -> dict:
    """`params` (emptied) on the devices, one array at a time, each host array let go as soon
    as its copy is made: the model is held about once, never twice."""
    import jax

    from engine.loader.orbax import sharding_tree

    leaves, treedef = jax.tree.flatten(params)
    targets = treedef.flatten_up_to(sharding_tree(config, params, shardings))
    params.clear()
    placed = []
    for index, target in enumerate(targets):
        placed.append(jax.block_until_ready(jax.device_put(leaves[index], target)))
        leaves[index] = None
        # JAX drops a finished transfer's host array when Python's garbage collector next
        # runs (its gc callback); a young-generation collection is enough, and takes no time.
        gc.collect(0)
    return jax.tree.unflatten(treedef, placed)


def _load_gguf(source: ModelSource, with_params: bool, progress: Progress | None, blocks: bool) -> Checkpoint:
    from engine.loader.gguf import config_from_gguf, load_gguf_params, read_gguf
    from engine.loader.gguf_blocks import WeightFormats

    reader = read_gguf(source.path)
    config = config_from_gguf(reader.fields, {t.name for t in reader.tensors})
    formats = WeightFormats() if blocks and with_params else None
    params = load_gguf_params(reader, config, progress, formats) if with_params else None
    if formats is not None:
        formats.log()
    # The parsed header (and its views of the mapped file, ~200 MB resident for SmolLM2)
    # lives on only as long as this checkpoint's `gguf_fields`, not for the process.
    read_gguf.cache_clear()
    return Checkpoint(config, params, source, gguf_fields=reader.fields, formats=formats)


def _load_hf(source: ModelSource, with_params: bool, progress: Progress | None) -> Checkpoint:
    from engine.loader.hf import load_hf_config, load_hf_params

    config = load_hf_config(source.path)
    return Checkpoint(config, load_hf_params(source.path, config, progress) if with_params else None, source)


def _load_orbax(source: ModelSource, shardings: Any, progress: Progress | None) -> Checkpoint:
    from engine.loader.orbax import restore_orbax

    config, params = restore_orbax(source.path, shardings, progress=progress)
    return Checkpoint(config, params, source)
