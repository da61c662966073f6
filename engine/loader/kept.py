"""What a start needs of a checkpoint besides its weights, kept between starts: its
context length, its ModelConfig and its tokenizer.

Parsing SmolLM2's GGUF header takes about 2.5 s on a 2-core CPU (the tokenizer's two arrays
of 49,152 strings, element by element), and a start needs it only for these three things.
They are written, as JSON, beside the served weights (engine/loader/served_cache.py) the
first time; a later start of the same file reads them back instead.

Everything kept is found by the checkpoint's files' identity (path, size, modification
time) and FORMAT: a changed file, or a new format, is a miss, and the checkpoint is read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from engine.config import ModelConfig

log = logging.getLogger("flint")

FORMAT = "flint-kept-1"


@dataclass(frozen=True)
class KeptDescription:
    """A checkpoint's context length, config and tokenizer, as a start kept them."""

    context_length: int | None
    config: ModelConfig
    tokenizer_values: dict  # what `save_description` kept of the tokenizer

    @functools.cached_property
    def tokenizer(self):  # engine.text.tokenizer.Tokenizer
        """Built where it is asked for: resolving a model reads its context length alone,
        and building the tokenizer takes a tenth of a second."""
        return _tokenizer(self.tokenizer_values)


def files_key(path: Path) -> str:
    """A key for the checkpoint at `path` (a file, or a directory's files) as it is now."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    identity = [FORMAT] + [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]


def description_path(directory: str | os.PathLike, path: Path) -> Path:
    return Path(directory).expanduser() / f"{path.name.split('.')[0]}-{files_key(path)}.json"


def save_description(directory: str | os.PathLike, path: Path, context_length: int | None, config: ModelConfig,
                     tokenizer) -> None:
    """Keep what `load_description` gives back; a failure to write is only logged."""
    from engine.loader.orbax import config_to_dict

    document = {"format": FORMAT, "context_length": context_length, "config": config_to_dict(config),
                "tokenizer": {"json": tokenizer.to_json_str(), "bos_token_id": tokenizer.bos_token_id,
                              "eos_token_ids": list(tokenizer.eos_token_ids), "pad_token_id": tokenizer.pad_token_id,
                              "chat_template": tokenizer.chat_template}}
    target = description_path(directory, path)
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(document))
        partial.replace(target)
    except OSError as error:
        log.warning("the model's description not kept at %s: %s", target, error)


def load_description(directory: str | os.PathLike | None, path: Path) -> KeptDescription | None:
    """What a start kept of the checkpoint at `path` as it is now, or None."""
    if directory is None:
        return None
    target = description_path(directory, path)
    try:
        document = json.loads(target.read_text())
    except (OSError, ValueError):
        return None
    if document.get("format") != FORMAT:
        return None
    return KeptDescription(document["context_length"], _config(document["config"]), document["tokenizer"])


def _config(values: dict) -> ModelConfig:
    from engine.loader.orbax import config_from_dict

    return config_from_dict(values)


def _tokenizer(values: dict):
    import tokenizers

    from engine.text.tokenizer import Tokenizer

    return Tokenizer(tokenizers.Tokenizer.from_str(values["json"]), bos_token_id=values["bos_token_id"],
                     eos_token_ids=values["eos_token_ids"], pad_token_id=values["pad_token_id"],
                     chat_template=values["chat_template"])
