"""`flint serve --embedding-model` and `--rerank-model`: the encoders served beside the chat
model (engine/async_encoder.py), loaded and compiled with it at start-up."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from engine.async_encoder import AsyncEncoder
from engine.device.encoder_runner import ROW_BUCKETS
from engine.loader.encoder_checkpoint import EncoderCheckpoint
from engine.loader.hub import cached_model, split_repo_id
from engine.loader.sentence_transformers import EMBEDDED_EMBEDDER_ID, embedded_embedder_path, load_encoder

log = logging.getLogger("flint")
DEFAULT = "default"  # --embedding-model default: the embedded all-MiniLM-L6-v2


def add_encoder_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embedding-model", metavar="MODEL", action="append", default=[],
                        help="also serve an embedder or a reranker (/v1/embeddings, /v1/rerank, /v1/score), by its "
                             "folder's name: a BERT sentence-transformers folder or zip, or a Hugging Face decoder "
                             "folder of a served family (last-token pooling, as Qwen3-Embedding), or either by "
                             "Hugging Face repo id from the local cache (--download fetches it); 'default': the "
                             f"embedded {EMBEDDED_EMBEDDER_ID} (repeatable)")
    parser.add_argument("--rerank-model", metavar="PATH", action="append", default=[],
                        help="also serve a reranker (/v1/rerank, /v1/score): a BERT cross-encoder's "
                             "sentence-transformers folder or zip, or a Hugging Face decoder folder read as a "
                             "yes/no reranker, as Qwen3-Reranker; or a repo id, as --embedding-model (repeatable)")


def encoder_checkpoint(model: str, task: str | None = None, download: bool = False) -> EncoderCheckpoint:
    """The encoder `model` names: the embedded one, a folder or zip (served by its name), or
    a Hugging Face repo id in the local Hugging Face cache, fetched first where `download`
    (served by its id, as the chat model's `--model` is; LookupError when not cached)."""
    if model == DEFAULT:
        return load_encoder(embedded_embedder_path(), EMBEDDED_EMBEDDER_ID)
    repo = split_repo_id(model) if not Path(model).exists() else None
    if repo is not None and repo[1] is None:
        return load_encoder(cached_model(repo[0], None, download), repo[0], task=task)
    return load_encoder(model, task=task)


def load_encoders(embedding_models: tuple[str, ...], rerank_models: tuple[str, ...], taken_ids: set[str],
                  row_buckets: tuple[int, ...] = ROW_BUCKETS, download: bool = False) -> dict[str, AsyncEncoder]:
    """Each named encoder loaded, compiled and running, by id; ValueError naming the flag of
    one that cannot be (not found, not run, a reranker expected, an id already served)."""
    encoders: dict[str, AsyncEncoder] = {}
    flagged = [("--embedding-model", model) for model in embedding_models]
    flagged += [("--rerank-model", model) for model in rerank_models]
    try:
        for flag, model in flagged:
            checkpoint = checked(flag, model, taken_ids | set(encoders), download)
            encoders[checkpoint.id] = AsyncEncoder.started(checkpoint, row_buckets)
            log.info("%s %s: %s served (%s), %d buckets compiled", flag, model, checkpoint.id, checkpoint.task,
                     len(encoders[checkpoint.id].runner.compiled))
    except Exception:
        stop_encoders(encoders)
        raise
    return encoders


def checked(flag: str, model: str, taken_ids: set[str], download: bool = False) -> EncoderCheckpoint:
    try:
        checkpoint = encoder_checkpoint(model, "rerank" if flag == "--rerank-model" else None, download)
    except (OSError, ValueError, KeyError, LookupError) as error:
        raise ValueError(f"{flag} {model}: {error}") from None
    if flag == "--rerank-model" and checkpoint.task != "rerank":
        raise ValueError(f"{flag} {model}: an embedder, not a reranker (--embedding-model serves it)")
    if checkpoint.id in taken_ids:
        raise ValueError(f"{flag} {model}: the id {checkpoint.id!r} is already served")
    return checkpoint


def stop_encoders(encoders: dict[str, AsyncEncoder]) -> None:
    for encoder in encoders.values():
        encoder.stop()
