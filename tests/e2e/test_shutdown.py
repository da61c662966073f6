"""`flint serve` stopping: SIGTERM drains in-flight requests and exits 0; a model that
cannot be loaded ends the process with an error instead of "starting" forever."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import httpx
import pytest

from flint_process import FLINT, SMALL_ENGINE_FLAGS, free_port, start_flint, wait_for_health, write_tiny_model

SHUTDOWN_TIMEOUT = 30
MAX_TOKENS = 400


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint)


def stream_events(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: "):])


def refused_or_draining(base_url: str) -> bool:
    """True once a new request cannot get in: the connection is refused, or answered 503."""
    try:
        return httpx.get(f"{base_url}/v1/models", timeout=2).status_code == 503
    except httpx.ConnectError:
        return True


def connection_refused(base_url: str) -> bool:
    """True once the listening socket is closed: refused, or reset when the connection was
    queued in its backlog as it closed."""
    try:
        httpx.get(f"{base_url}/health", timeout=2)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return True
    return False


def test_sigterm_finishes_the_stream_refuses_new_connections_and_exits_0(tiny_model, tmp_path):
    port, log_path = free_port(), tmp_path / "serve.log"
    process = start_flint(["--model", str(tiny_model), "--port", str(port),
                           "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), *SMALL_ENGINE_FLAGS], log_path)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process, log_path)
        body = {"prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            events = stream_events(response)
            first = next(events)
            process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 5
            while not refused_or_draining(base_url):
                assert time.monotonic() < deadline, "the server still accepts requests after SIGTERM"
                time.sleep(0.05)
            # The API answers 503 at once (the signal handler drains it); the listening socket
            # closes on uvicorn's next turn of its main loop, a tenth of a second later.
            while not connection_refused(base_url):
                assert time.monotonic() < deadline, "the listening socket is still open after SIGTERM"
                time.sleep(0.05)
            rest = list(events)  # the in-flight stream still runs to its end
        assert rest, "the stream ended before the server stopped accepting: nothing was drained"
        choices = [choice for event in [first, *rest] for choice in event["choices"]]
        assert choices[-1]["finish_reason"] == "length"
        assert rest[-1]["usage"]["completion_tokens"] == MAX_TOKENS
        assert process.wait(timeout=SHUTDOWN_TIMEOUT) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_model_that_cannot_load_exits_with_an_error(tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # found as a Hugging Face directory; no weights
    result = subprocess.run(
        [FLINT, "serve", "--model", str(broken),
         "--port", str(free_port()), *SMALL_ENGINE_FLAGS],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "could not be loaded" in result.stderr
