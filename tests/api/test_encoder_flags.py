"""`--embedding-model` and `--rerank-model` (api/server/encoders.py) as they load, before any
compile: a Hugging Face repo id from the local cache, served under its id, and each model
that cannot be served refused naming its flag."""

from __future__ import annotations

import pytest

from api.server.encoders import checked
from tests.engine.bert_reference import write_cross_encoder, write_sentence_transformer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def cached_snapshot(cache, repo_id: str):
    """A snapshot of `repo_id` in the layout huggingface_hub keeps, its main ref naming it."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return repo / "snapshots" / COMMIT


def test_a_cached_repo_id_is_served_under_its_id(hub_cache):
    write_sentence_transformer(cached_snapshot(hub_cache, "acme/tiny-embedder"))
    write_cross_encoder(cached_snapshot(hub_cache, "acme/tiny-reranker"))
    embedder = checked("--embedding-model", "acme/tiny-embedder", set())
    reranker = checked("--rerank-model", "acme/tiny-reranker", set())
    assert (embedder.id, embedder.task, reranker.id, reranker.task) == (
        "acme/tiny-embedder", "embed", "acme/tiny-reranker", "rerank")


def test_what_cannot_be_served_is_refused_naming_the_flag(hub_cache, tmp_path):
    with pytest.raises(ValueError, match=r"--embedding-model acme/absent: .*not in the Hugging Face cache.*--download"):
        checked("--embedding-model", "acme/absent", set())
    write_sentence_transformer(tmp_path / "embedder")
    with pytest.raises(ValueError, match="--rerank-model .*an embedder, not a reranker"):
        checked("--rerank-model", str(tmp_path / "embedder"), set())
    with pytest.raises(ValueError, match="--embedding-model .*'embedder' is already served"):
        checked("--embedding-model", str(tmp_path / "embedder"), {"embedder"})
    with pytest.raises(ValueError, match="--embedding-model .*nowhere"):
        checked("--embedding-model", str(tmp_path / "nowhere"), set())
