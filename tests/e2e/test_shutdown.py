"""`flint serve` stopping: SIGTERM drains in-flight requests and exits 0; streams still
running when the shutdown timeout runs out end with their dialect's error event, not a cut
connection; a model that cannot be loaded ends the process with an error instead of
"starting" forever."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import httpx
import pytest
from flint_process import FLINT, SMALL_ENGINE_FLAGS, free_port, start_flint, wait_for_health, write_tiny_model

from api.server.serve import BREAK_OFF_GRACE

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
    """True once a new request cannot get in: the connection is refused (or reset, when it sat
    in the backlog as the listening socket closed), or answered 503."""
    try:
        return httpx.get(f"{base_url}/v1/models", timeout=2).status_code == 503
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
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


CUT_OFF_TIMEOUT = 2  # seconds: far shorter than the streams below take
LONG_CONTEXT = 16384
LONG = LONG_CONTEXT - 64  # tokens: streams that cannot end by themselves before the timeout
# Two sequences of the long context at once, a token each per step: the streams run side by side.
TWO_STREAM_FLAGS = ["--max-model-len", str(LONG_CONTEXT), "--max-num-seqs", "2", "--max-num-batched-tokens", "2",
                    "--num-pages", str(2 * LONG_CONTEXT // 16 + 1)]
STREAMS = {  # path: a body that streams LONG tokens (and names the model)
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": LONG,
                             "ignore_eos": True, "stream": True},
    "/v1/messages": {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": LONG,
                     "temperature": 0, "stream": True},
}


class StreamReader(threading.Thread):
    """Reads one SSE stream to its end: its raw lines, when it ended, and the error that
    ended it early (a cut connection), if any."""

    def __init__(self, url: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.lines: list[str] = []
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.ended = 0.0  # time.monotonic()

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url, json=self.body, timeout=60) as response:
                assert response.status_code == 200, response.read()
                for line in response.iter_lines():
                    self.lines.append(line)
                    self.started.set()
        except BaseException as error:  # reported by the test
            self.error = error
        finally:
            self.ended = time.monotonic()
            self.started.set()

    def data(self) -> list[str]:
        return [line[len("data: "):] for line in self.lines if line.startswith("data: ")]


@pytest.fixture(scope="module")
def long_tiny_model(tmp_path_factory, smollm2_checkpoint):
    """The tiny model with room for streams that outlast the test's timeout: it decodes
    thousands of tokens a second, and its 512 positions would be gone in a fraction of one."""
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "long-tiny-model", smollm2_checkpoint, LONG_CONTEXT)


def test_streams_running_when_the_timeout_runs_out_end_with_their_error_event(long_tiny_model, tmp_path):
    port, log_path = free_port(), tmp_path / "serve.log"
    process = start_flint(["--model", str(long_tiny_model), "--port", str(port), "--shutdown-timeout",
                           str(CUT_OFF_TIMEOUT), "--log-format", "json", *TWO_STREAM_FLAGS], log_path)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process, log_path)
        model = httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]
        readers = {path: StreamReader(base_url + path, {**body, "model": model}) for path, body in STREAMS.items()}
        for reader in readers.values():
            reader.start()
        for reader in readers.values():
            assert reader.started.wait(60) and reader.error is None, reader.error
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        for reader in readers.values():
            reader.join(timeout=CUT_OFF_TIMEOUT + 30)
            assert not reader.is_alive() and reader.error is None, reader.error  # ended, not cut
            # They ran on through the timeout, and ended at it, not when uvicorn cancels.
            assert CUT_OFF_TIMEOUT - 0.5 < reader.ended - signalled < CUT_OFF_TIMEOUT + BREAK_OFF_GRACE
        assert process.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    chat = readers["/v1/chat/completions"].data()
    assert chat[-1] == "[DONE]"
    assert json.loads(chat[-2])["error"]["code"] == "cut_off"
    assert not any(json.loads(data).get("choices", [{}])[0].get("finish_reason") for data in chat[:-2])
    messages = readers["/v1/messages"].lines
    events = [line[len("event: "):] for line in messages if line.startswith("event: ")]
    assert events[-1] == "error" and "message_stop" not in events
    assert json.loads(readers["/v1/messages"].data()[-1]) == {
        "type": "error", "error": {"type": "overloaded_error", "message": json.loads(chat[-2])["error"]["message"]}}
    check_json_log(log_path.read_text())


def check_json_log(log: str) -> None:
    """`--log-format json`: Flint's and uvicorn's lines are JSON objects, the streams have
    their access lines, and the cut-off is told."""
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert not [line for line in log.splitlines() if line.startswith("INFO:")], "uvicorn's text lines remain"
    assert any(entry["logger"].startswith("uvicorn") for entry in entries)
    streams = [entry for entry in entries if entry["logger"] == "flint.access" and entry["path"] in STREAMS]
    assert len(streams) == 2 and all(entry["status"] == 200 and entry["streamed"] for entry in streams), streams
    assert any("still running were ended" in entry["message"] for entry in entries)


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
