"""What an embedder or a reranker is to the runner and the API, whatever its architecture
(engine/loader/sentence_transformers.py reads BERT checkpoints, decoder_encoder.py decoders),
and the files of a checkpoint in a folder or a zip."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.models.pooling import Pooling
from engine.text.tokenizer import Tokenizer


class PairPrompt(Protocol):
    """How a reranker puts a query and a document in one input (ids, token types or None),
    the document cut to its first `max_second` tokens where given."""

    def encode_pair(self, first: str, second: str, max_second: int | None = None) -> tuple[list[int], list[int] | None]:
        ...


@dataclass(frozen=True)
class EncoderCheckpoint:
    """An embedder or a reranker: its model's config (a BertConfig or, for a decoder run as
    an encoder, a ModelConfig: both give `vocab_size` and `hidden_size`), its weights and the
    forward over them (`forward(weights, ids, types, lengths)`: [texts, hidden] vectors or
    [texts] scores, engine/models/bert.py and decoder_encoder.py), its tokenizer, and the
    most tokens a text (or a query and document pair) may have."""

    id: str
    config: Any
    weights: dict
    forward: Callable
    tokenizer: Tokenizer
    max_tokens: int
    task: str  # "embed" or "rerank"
    pooling: Pooling | None = None  # an embedder's
    activation: str | None = None  # a cross-encoder's ("sigmoid" or "identity", bert.relevance)
    # A decoder reranker's prompt (engine/text/rerank_prompt.py); None: the tokenizer's
    # post-processor joins the pair ([CLS] query [SEP] document [SEP]).
    pair_prompt: PairPrompt | None = None
    # Widths an embedder was trained to be cut to (Matryoshka: config.json's vLLM-style
    # `matryoshka_dimensions`, or `is_matryoshka` for any): None, not trained for it; (): any.
    matryoshka: tuple[int, ...] | None = None

    def allows_dimensions(self, dimensions: int) -> bool:
        """Whether an embedding may be cut to its first `dimensions` (its full width always)."""
        width = self.config.hidden_size
        if dimensions == width:
            return True
        return self.matryoshka is not None and dimensions < width and (
            not self.matryoshka or dimensions in self.matryoshka)

    @property
    def shortest_input(self) -> int:
        """Tokens every input has at least: a decoder reranker's prompt around the pair (no
        token bucket below it is ever used, so none is compiled)."""
        return len(self.pair_prompt.encode_pair("", "")[0]) if self.pair_prompt is not None else 0

    def encode_pair(self, first: str, second: str, max_second: int | None = None) -> tuple[list[int], list[int] | None]:
        return (self.pair_prompt or self.tokenizer).encode_pair(first, second, max_second)


class CheckpointFiles:
    """A checkpoint's files by relative name, in a folder or in a zip (at its root or under one folder)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path) if self.path.is_file() else None
        names = self._zip.namelist() if self._zip is not None else []
        self._root = "" if not names or "config.json" in names else names[0].split("/")[0] + "/"

    def exists(self, name: str) -> bool:
        if self._zip is None:
            return (self.path / name).is_file()
        return self._root + name in self._zip.namelist()

    def read_bytes(self, name: str) -> bytes:
        if not self.exists(name):
            raise FileNotFoundError(f"{self.path} has no {name}")
        return self._zip.read(self._root + name) if self._zip is not None else (self.path / name).read_bytes()

    def read_json(self, name: str) -> dict:
        return json.loads(self.read_bytes(name))


def max_seq_length(files: CheckpointFiles, limit: int) -> int:
    """sentence-transformers' max_seq_length where the checkpoint states it, within `limit`."""
    if files.exists("sentence_bert_config.json"):
        return min(limit, files.read_json("sentence_bert_config.json").get("max_seq_length") or limit)
    return limit


def matryoshka(config: dict) -> tuple[int, ...] | None:
    if config.get("matryoshka_dimensions"):
        return tuple(int(width) for width in config["matryoshka_dimensions"])
    return () if config.get("is_matryoshka") else None
