"""`flint serve` as a user runs it: a real uvicorn process on a free loopback port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

FLINT = shutil.which("flint", path=str(Path(sys.executable).parent))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(base_url: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise TimeoutError("flint serve did not become healthy")


@pytest.fixture(scope="module")
def server():
    assert FLINT, "the flint console script is not installed in this environment"
    port = free_port()
    process = subprocess.Popen(
        [FLINT, "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process)
        yield base_url
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_serve_answers_health_and_models(server):
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}
    models = httpx.get(f"{server}/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct"]


def test_serve_refuses_a_missing_model(tmp_path):
    result = subprocess.run(
        [FLINT, "serve", "--port", str(free_port()), "--model", str(tmp_path / "none.gguf")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "none.gguf" in result.stderr
