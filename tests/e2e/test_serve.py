"""`flint serve` as a user runs it: a real uvicorn process on a free loopback port."""

from __future__ import annotations

import signal
import socket
import subprocess

import httpx
import pytest

from flint_process import FLINT, free_port, start_flint, wait_for_health


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve") / "flint.log"
    process = start_flint(["--host", "127.0.0.1", "--port", str(port)], log_path)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process, log_path, timeout=900)
        yield base_url
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_serve_answers_health_and_models(server):
    assert httpx.get(f"{server}/health").json()["status"] == "ok"
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


def test_serve_exits_at_once_with_a_clear_message_when_the_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([FLINT, "serve", "--host", "127.0.0.1", "--port", str(port)],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "in use" in result.stderr
    assert "terminate called" not in result.stderr and "compiled bucket" not in result.stderr

