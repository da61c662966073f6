"""Models named by Hugging Face repo id, from a Hugging Face cache the tests build in the
layout huggingface_hub keeps (models--ORG--NAME/refs/main naming a snapshot)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from loader_files import write_gguf, write_hf
from test_loaders import CONFIGS

from engine.loader.checkpoint import load_checkpoint
from engine.loader.source import ModelNotFoundError, resolve_model
from engine.models.params import random_params

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def cached_snapshot(cache: Path, repo_id: str) -> Path:
    """An empty snapshot of `repo_id` in `cache`, its main ref pointing at it."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    return snapshot


def test_a_cached_repo_id_loads_and_is_listed_under_its_id(hub_cache):
    config = CONFIGS["qwen3"]
    params = random_params(config, seed=3)
    snapshot = write_hf(cached_snapshot(hub_cache, "acme/tiny-qwen3"), config, params, "qwen3")
    source = resolve_model("acme/tiny-qwen3")
    assert (source.id, source.path, source.format) == ("acme/tiny-qwen3", snapshot.resolve(), "hf")
    checkpoint = load_checkpoint("acme/tiny-qwen3")
    assert checkpoint.config == config
    np.testing.assert_array_equal(checkpoint.params["layers"]["q_norm"], params["layers"]["q_norm"])


def test_one_gguf_file_of_a_repo(hub_cache):
    config = CONFIGS["llama"].replace(rope_scaling=None, eos_token_ids=(2,))
    snapshot = cached_snapshot(hub_cache, "acme/tiny-gguf")
    write_gguf(snapshot / "tiny.Q8_0.gguf", config, random_params(config), "llama")
    source = resolve_model("acme/tiny-gguf/tiny.Q8_0.gguf")
    assert (source.id, source.format) == ("tiny", "gguf")
    with pytest.raises(ModelNotFoundError, match="without other.gguf"):
        resolve_model("acme/tiny-gguf/other.gguf")


def test_a_repo_that_is_not_cached_is_refused_without_a_download(hub_cache):
    with pytest.raises(ModelNotFoundError, match=r"acme/absent is not in the Hugging Face cache .* --download"):
        resolve_model("acme/absent")


def test_download_asks_huggingface_hub_for_the_checkpoint_files(hub_cache, monkeypatch):
    """With --download the lookup may use the network, for the checkpoint's files only."""
    import huggingface_hub

    calls = []

    def snapshot_download(repo_id, allow_patterns, local_files_only):
        calls.append((repo_id, local_files_only, allow_patterns))
        return write_hf(cached_snapshot(hub_cache, repo_id), CONFIGS["llama"], random_params(CONFIGS["llama"]),
                        "llama")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert resolve_model("acme/fetched", download=True).id == "acme/fetched"
    [(repo_id, local_only, patterns)] = calls
    assert (repo_id, local_only) == ("acme/fetched", False) and "*.safetensors" in patterns


def test_flint_refuses_an_uncached_repo_with_status_2_and_the_reason(tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "api.server.cli", "generate", "--model", "acme/absent", "Hi"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert "acme/absent is not in the Hugging Face cache" in result.stderr and "--download" in result.stderr
