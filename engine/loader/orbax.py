"""Orbax checkpoints: the weights pytree saved once, then restored fast and straight onto devices.

A directory written by `save_orbax` holds

    params/             the weights pytree, written by orbax-checkpoint
    flint_config.json   {"format_version": 1, "model_config": {...ModelConfig fields...},
                         "source": the checkpoint it was converted from, or null}

flint_config.json is written last, so a directory that has it holds a complete checkpoint;
engine/loader/source.py recognises Orbax directories by it. Restoring with shardings reads
each device's shard straight from disk onto that device, never the whole array on the host.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from engine.config import ModelConfig, RopeScaling
from engine.loader.source import ORBAX_CONFIG_FILE
from engine.loader.progress import WEIGHTS, Progress, StageCount

FORMAT_VERSION = 1
PARAMS_DIR = "params"

# Either a pytree of Shardings shaped like the params, or a function of the ModelConfig and
# the params as a pytree of jax.ShapeDtypeStruct that returns one, e.g.
# `lambda config, params: engine.sharding.param_shardings(config, mesh, params)`: a caller
# cannot know before reading the checkpoint whether it holds optional weights.
Shardings = Any | Callable[[ModelConfig, dict], Any]


def config_to_dict(config: ModelConfig) -> dict:
    """ModelConfig as plain JSON-ready values."""
    values = dataclasses.asdict(config)
    values["eos_token_ids"] = list(config.eos_token_ids)
    return values


def config_from_dict(values: dict) -> ModelConfig:
    """Inverse of config_to_dict."""
    values = dict(values)
    scaling = values.pop("rope_scaling", None)
    eos = values.pop("eos_token_ids", ())
    windows = values.pop("layer_windows", ())
    return ModelConfig(**values, rope_scaling=RopeScaling(**scaling) if scaling else None,
                       eos_token_ids=tuple(eos), layer_windows=tuple(windows))


def save_orbax(directory: str | Path, config: ModelConfig, params: dict, *,
               overwrite: bool = False, source: str | None = None) -> Path:
    """Write `params` (NumPy or jax arrays) and `config` under `directory`; return its path.

    `source`, the checkpoint converted from, is recorded in flint_config.json as provenance.
    Raises FileExistsError if `directory` already holds a checkpoint, unless `overwrite`.
    """
    import orbax.checkpoint as ocp  # deferred: only conversion and Orbax loading need it

    directory = Path(directory).resolve()  # orbax refuses relative paths
    marker = directory / ORBAX_CONFIG_FILE
    if marker.exists() and not overwrite:
        raise FileExistsError(f"{directory} already holds a checkpoint")
    marker.unlink(missing_ok=True)  # an interrupted overwrite must not look complete
    directory.mkdir(parents=True, exist_ok=True)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(directory / PARAMS_DIR, params, force=overwrite)
    document = {"format_version": FORMAT_VERSION, "model_config": config_to_dict(config),
                "source": source}
    marker.write_text(json.dumps(document, indent=2) + "\n")
    return directory


def read_orbax_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig saved beside an Orbax checkpoint."""
    document = json.loads((Path(directory) / ORBAX_CONFIG_FILE).read_text())
    if document.get("format_version") != FORMAT_VERSION:
        version = document.get("format_version")
        raise ValueError(f"{directory}: unknown checkpoint format_version {version}")
    return config_from_dict(document["model_config"])


def restore_orbax(directory: str | Path, shardings: Shardings | None = None,
                  dtype: Any = None, progress: Progress | None = None) -> tuple[ModelConfig, dict]:
    """Read a checkpoint written by save_orbax: (config, params).

    Without `shardings` the params are NumPy arrays on the host. With them (see Shardings
    above), each weight becomes a jax.Array laid out by its Sharding. `dtype` (such as
    "bfloat16") casts the weights as they are read. `progress` is told the weights'
    count before and after (engine/loader/progress.py): Orbax restores them all in one call.
    """
    import orbax.checkpoint as ocp

    directory = Path(directory).resolve()
    config = read_orbax_config(directory)
    with ocp.PyTreeCheckpointer() as checkpointer:
        stored = checkpointer.metadata(directory / PARAMS_DIR).item_metadata.tree
        args = _restore_args(config, stored, shardings, dtype)
        count = StageCount(progress, WEIGHTS, len(jax.tree.leaves(stored)))
        params = checkpointer.restore(directory / PARAMS_DIR, restore_args=args)
    count.finish()
    return config, params


def sharding_tree(config: ModelConfig, tree: Any, shardings: Shardings) -> Any:
    """`shardings` as a pytree matching `tree` (leaves with .shape, .dtype); calls it if callable."""
    if not callable(shardings):
        return shardings
    abstract = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype), tree)
    return shardings(config, abstract)


def _restore_args(config: ModelConfig, stored: dict, shardings: Shardings | None,
                  dtype: Any) -> dict:
    import orbax.checkpoint as ocp

    dtype = np.dtype(dtype) if dtype is not None else None
    if shardings is None:
        return jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray, dtype=dtype), stored)
    shardings = sharding_tree(config, stored, shardings)
    return jax.tree.map(
        lambda meta, sharding: ocp.ArrayRestoreArgs(
            sharding=sharding, global_shape=tuple(meta.shape), dtype=dtype),
        stored, shardings)

