"""A stored chat completion is committed before its response returns: completions stored
by a `flint serve` process killed with SIGKILL are all listed by the next process on the
same data directory."""

from __future__ import annotations

import signal

import httpx
import pytest

from flint_process import SMALL_ENGINE_FLAGS, free_port, start_flint, wait_for_health, write_tiny_model

NUM_COMPLETIONS = 5


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint)


def serve(tiny_model, data_dir, log_path):
    port = free_port()
    process = start_flint(["--model", str(tiny_model), "--port", str(port), "--data-dir", str(data_dir),
                           *SMALL_ENGINE_FLAGS], log_path)
    base_url = f"http://127.0.0.1:{port}"
    wait_for_health(base_url, process, log_path)
    return process, base_url


def store_completion(base_url: str, index: int) -> str:
    model = httpx.get(f"{base_url}/v1/models", timeout=30).json()["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": f"Count to {index}"}],
            "max_completion_tokens": 2, "store": True, "metadata": {"index": str(index)}}
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["id"]


def test_completions_stored_before_a_sigkill_are_listed_after_restart(tiny_model, tmp_path):
    data_dir = tmp_path / "data"
    process, base_url = serve(tiny_model, data_dir, tmp_path / "first.log")
    try:
        stored = [store_completion(base_url, index) for index in range(NUM_COMPLETIONS)]
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    process, base_url = serve(tiny_model, data_dir, tmp_path / "second.log")
    try:
        listed = httpx.get(f"{base_url}/v1/chat/completions", params={"limit": 100}, timeout=30).json()
        assert [completion["id"] for completion in listed["data"]] == stored
        assert [completion["metadata"]["index"] for completion in listed["data"]] == [
            str(index) for index in range(NUM_COMPLETIONS)]
    finally:
        process.terminate()
        process.wait(timeout=60)
