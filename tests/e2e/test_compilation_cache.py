"""A warm restart compiles nothing: `flint serve` run twice on one compilation cache loads every
program of its start-up from the cache the second time, reads each bucket's lowered step rather
than tracing the model, and serves the same answer with them."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest
from flint_process import SMALL_ENGINE_FLAGS, free_port, start_flint, wait_for_health, write_tiny_model

# The start-up report of api/lifecycle.load_engine.
LOADED = re.compile(r"model loaded in [\d.]+ s: (\d+) programs compiled, (\d+) loaded from the compilation cache")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint)


def serve_once(model: Path, flags: list[str], log_path: Path) -> tuple[int, int, str]:
    """Start `flint serve`, answer one greedy completion, stop it. Returns the programs it
    compiled and those it loaded from the cache at start-up, and the completion's text."""
    port = free_port()
    process = start_flint(["--model", str(model), "--port", str(port), *SMALL_ENGINE_FLAGS, *flags], log_path)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process, log_path)
        response = httpx.post(f"{base_url}/v1/completions", timeout=120, json={
            "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        assert response.status_code == 200, response.text
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    report = LOADED.search(log_path.read_text())
    assert report, log_path.read_text()
    return int(report[1]), int(report[2]), response.json()["choices"][0]["text"]


def test_a_warm_restart_compiles_nothing(tiny_model, tmp_path):
    flags = ["--compilation-cache", str(tmp_path / "cache")]
    compiled, loaded, cold_text = serve_once(tiny_model, flags, tmp_path / "cold.log")
    # The control: a cold start compiles (the step, the KV cache's zeros, ...) and is seen to.
    assert compiled > 0 and loaded == 0
    assert any((tmp_path / "cache").iterdir())

    assert "its kept lowering read" not in (tmp_path / "cold.log").read_text()
    assert list((tmp_path / "cache" / "steps").glob("*.step"))  # each bucket's lowered step kept

    recompiled, reloaded, warm_text = serve_once(tiny_model, flags, tmp_path / "warm.log")
    assert recompiled == 0
    assert reloaded == compiled  # every program of the cold start, from the cache
    assert warm_text == cold_text  # and they compute what the compiled ones did
    # Nor was the model traced: each bucket of the start-up read its lowered step (engine/device/step_export.py).
    buckets = re.findall(r"(?<!background: )compiled bucket \d+/\d+: \d+ tokens, (.*?) in ",
                         (tmp_path / "warm.log").read_text())
    assert buckets and set(buckets) == {"its kept lowering read"}
    # Nor did the request compile anything (api/server/lifecycle.py names any program made while serving).
    assert "compiled while serving" not in (tmp_path / "warm.log").read_text()


def test_no_compilation_cache_keeps_nothing(tiny_model, tmp_path, monkeypatch):
    # Not even where JAX's own setting points (the test suite sets it for its servers).
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax-cache"))
    compiled, loaded, _ = serve_once(tiny_model, ["--no-compilation-cache"], tmp_path / "serve.log")
    assert compiled > 0 and loaded == 0
    assert "the compilation cache (off)" in (tmp_path / "serve.log").read_text()
    assert not (tmp_path / "jax-cache").exists()
