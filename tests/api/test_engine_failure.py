"""An engine that dies on an error mid-step takes the server out of service, visibly: the
requests it was running end with an error (an error event in a stream, an error answer
otherwise), /health says 503 `failed`, every new generation gets a 503 in its dialect's
error shape, and the lifecycle reports the failure (with which `flint serve` exits 1, for
its supervisor to restart it: tests/e2e/test_engine_failure_exit.py)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from api_helpers import TINY_ENGINE, live_app

from api.server.settings import Settings

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "Tell me a story"}]


class InjectedFault(RuntimeError):
    pass


@pytest.fixture
def failing(tiny_app_factory):
    """(client, server, arm, failures): a client of a served app whose engine step raises once
    `arm()` is called; `server` is its ServerState; `failures` collects what the lifecycle reported."""
    app = tiny_app_factory(Settings(engine=TINY_ENGINE))
    failures: list[BaseException] = []
    with live_app(app) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:
        app.state.lifecycle.on_failure = failures.append
        runner = app.state.server.running_engine.engine.runner
        original, armed = runner.collect, threading.Event()

        def collect(flight):  # where a device error would surface
            if armed.is_set():
                raise InjectedFault("a device error in the middle of a step")
            time.sleep(0.05)  # slow steps: requests are still running when the fault comes
            return original(flight)

        runner.collect = collect
        yield client, app.state.server, armed.set, failures


def wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_dead_engine_fails_its_requests_and_the_server(failing):
    client, server, arm, failures = failing
    long = {"max_tokens": 200, "ignore_eos": True, "temperature": 0}
    answers = {}
    whole = threading.Thread(target=lambda: answers.update(
        whole=client.post("/v1/completions", json={"prompt": "Once upon a time", **long})))
    with client.stream("POST", "/v1/chat/completions",
                       json={"model": MODEL, "messages": USER, "stream": True, "max_completion_tokens": 200,
                             "ignore_eos": True}) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: ")  # the stream has begun
        whole.start()
        # Both running and each past its first output: the fault then falls mid-generation
        # (with steps dispatched ahead, being scheduled is not yet having an output).
        running = server.running_engine.engine.scheduler.running
        wait_for(lambda: len(running) == 2 and all(seq.num_output_tokens > 0 for seq in list(running)))
        arm()
        events = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    whole.join(timeout=60)
    # The running stream ends with an error event in OpenAI's shape, then [DONE].
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == "cut_off"
    # The running non-streamed request ends with its choice marked as failed.
    assert answers["whole"].status_code == 200 and answers["whole"].json()["choices"][0]["finish_reason"] == "error"
    wait_for(lambda: failures)
    assert isinstance(failures[0], InjectedFault) and len(failures) == 1
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "failed"
    chat = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
    assert chat.status_code == 503 and chat.json()["error"]["code"] == "failed"
    message = client.post("/v1/messages", json={"model": MODEL, "messages": USER, "max_tokens": 5})
    assert message.status_code == 503 and message.json()["error"]["type"] == "overloaded_error"
    assert client.post("/v1/completions", json={"prompt": "hi"}).status_code == 503
    assert server.num_admitted_choices == 0


def test_a_request_the_engine_dies_under_before_its_first_output_gets_a_503(failing):
    client, _, arm, failures = failing
    arm()
    response = client.post("/v1/messages", json={"model": MODEL, "messages": USER, "max_tokens": 5})
    assert response.status_code == 503 and response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "overloaded_error"
    wait_for(lambda: failures)
