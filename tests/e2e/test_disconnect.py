"""Clients that go away mid-stream free the engine: their requests stop running and their
KV pages return, as /metrics shows; and a full engine queue answers 429. Against the
session's live server (tests/e2e/conftest.py): a real socket close is needed, which the
in-process test client does not propagate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

NUM_STREAMS = 16
MAX_TOKENS = 480  # long enough that no stream finishes by itself during the test
# How long the engine may hold a dropped request, in its own steps (calls of Engine.step):
# the step in flight when the client leaves, and one more that may start before the abort
# lands (a closed socket is noticed at the next chunk written). Counted in steps, not
# seconds: a busy machine (the suite's other worker compiling beside it) stretches every
# step, not how many there are. A request the engine kept would run its 480 tokens.
STEPS_TO_LET_GO = 2
PATIENCE = 60  # seconds before a request the engine never lets go fails the test


@pytest.fixture(scope="module")
def server(live):
    """The live server, checked to run all the streams at once (each must get a first chunk)."""
    assert live.state.settings.engine.max_num_seqs >= NUM_STREAMS
    assert live.state.max_model_len > MAX_TOKENS + 16
    return live


def gauges(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics").text
    return {family.name: family.samples[0].value for family in text_string_to_metric_families(text)
            if family.type == "gauge" and family.name.startswith("flint:")}


def quiet_gauges(base_url: str) -> dict[str, float]:
    """The gauges once no request is running or waiting (an earlier test's may be ending)."""
    deadline = time.monotonic() + 30
    while (now := gauges(base_url))["flint:num_requests_running"] or now["flint:num_requests_waiting"]:
        assert time.monotonic() < deadline, f"the server never went quiet: {now}"
        time.sleep(0.05)
    return now


class StepCounter:
    """Counts the live engine's steps from the moment `mark()` is called."""

    def __init__(self, live, monkeypatch) -> None:
        engine = live.state.engine.engine
        self.steps, self.marked = 0, 0
        step = engine.step

        def counted():
            self.steps += 1
            return step()

        monkeypatch.setattr(engine, "step", counted)

    def mark(self) -> None:
        self.marked, self.started = self.steps, time.monotonic()

    def check(self, what: str) -> None:
        """Fails once the engine has taken too many steps, or too long, since `mark()`."""
        taken = self.steps - self.marked
        assert taken <= STEPS_TO_LET_GO, f"{what} after {taken} engine steps"
        assert time.monotonic() - self.started < PATIENCE, f"{what} after {PATIENCE} s"


@pytest.fixture
def steps(server, monkeypatch) -> StepCounter:
    return StepCounter(server, monkeypatch)


def open_stream(client: httpx.Client) -> tuple[httpx.Response, Iterator[str]]:
    """A streaming completion whose first chunk has arrived, left unread after it. The line
    iterator is returned to be kept: discarding it would already close the response."""
    body = {"prompt": "Tell me a long story", "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}
    response = client.send(client.build_request("POST", "/v1/completions", json=body), stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    assert next(lines).startswith("data: ")
    return response, lines


def test_dropped_streams_free_the_engine_within_a_few_steps(server, steps):
    base_url = server.base_url
    idle = gauges(base_url)
    assert idle["flint:num_requests_running"] == 0
    with httpx.Client(base_url=base_url, timeout=60) as client, ThreadPoolExecutor(NUM_STREAMS) as pool:
        streams = list(pool.map(lambda _: open_stream(client), range(NUM_STREAMS)))
        busy = gauges(base_url)
        assert busy["flint:num_requests_running"] == NUM_STREAMS
        assert busy["flint:kv_cache_usage_perc"] > idle["flint:kv_cache_usage_perc"]
        for response, _ in streams:
            response.close()  # unread: the connection is closed, not returned to the pool
    steps.mark()
    while (now := gauges(base_url))["flint:num_requests_running"] or \
            now["flint:kv_cache_usage_perc"] != idle["flint:kv_cache_usage_perc"]:
        steps.check(f"the engine still holds dropped requests: {now}")
        time.sleep(0.05)
    assert now["flint:num_requests_waiting"] == 0


def test_a_request_that_would_queue_past_max_waiting_is_429(server):
    base_url, state = server.base_url, server.state
    limits = state.settings
    with httpx.Client(base_url=base_url, timeout=60) as client, ThreadPoolExecutor(NUM_STREAMS) as pool:
        streams = list(pool.map(lambda _: open_stream(client), range(NUM_STREAMS)))  # the batch is full
        state.settings = replace(limits, max_waiting=0)
        try:
            response = client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
            assert response.status_code == 429 and response.headers["retry-after"] == "1"
            assert response.json()["error"]["code"] == "rate_limit_exceeded"
            chat = client.post("/v1/chat/completions", json={
                "model": state.model.id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
            assert chat.status_code == 429, chat.text
        finally:
            state.settings = limits
            for response, _ in streams:
                response.close()


def test_dropped_non_streamed_requests_free_the_engine_within_a_few_steps(server, steps):
    """Clients that give up on a non-streamed answer (a client timeout) abort it: the server
    notices the closed connection, not only the end of the generation."""
    base_url = server.base_url
    idle = quiet_gauges(base_url)
    body = {"prompt": "Tell me a long story", "max_tokens": MAX_TOKENS, "ignore_eos": True}

    def give_up(_) -> None:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{base_url}/v1/completions", json=body, timeout=0.5)

    with ThreadPoolExecutor(NUM_STREAMS) as pool:
        list(pool.map(give_up, range(NUM_STREAMS)))
    steps.mark()
    while (now := gauges(base_url))["flint:num_requests_running"] or now["flint:num_requests_waiting"] or \
            now["flint:kv_cache_usage_perc"] != idle["flint:kv_cache_usage_perc"]:
        steps.check(f"the engine still holds dropped requests: {now}")
        time.sleep(0.05)
    assert server.state.num_admitted_choices == 0


def test_a_stream_dropped_while_queued_never_runs(server, steps):
    """A streaming client that leaves before its first token (still queued behind a full
    batch) is noticed then, not only once its first chunk is written."""
    base_url, state = server.base_url, server.state
    quiet_gauges(base_url)
    with httpx.Client(base_url=base_url, timeout=60) as client, ThreadPoolExecutor(NUM_STREAMS) as pool:
        streams = list(pool.map(lambda _: open_stream(client), range(NUM_STREAMS)))  # the batch is full
        try:
            body = {"prompt": "Wait for me", "max_tokens": MAX_TOKENS, "stream": True}
            # The status line waits for the first token, which never comes while the batch is
            # full: the client gives up after a second of silence and closes the connection.
            def give_up() -> None:
                with pytest.raises(httpx.ReadTimeout):
                    httpx.post(f"{base_url}/v1/completions", json=body, timeout=httpx.Timeout(60, read=2.0))

            waiting = pool.submit(give_up)
            deadline = time.monotonic() + PATIENCE
            while gauges(base_url)["flint:num_requests_waiting"] != 1:  # it is read and queued
                assert time.monotonic() < deadline, "the request never queued"
                time.sleep(0.02)
            waiting.result()
            steps.mark()
            while gauges(base_url)["flint:num_requests_waiting"] or state.num_admitted_choices != NUM_STREAMS:
                steps.check("the dropped request is still queued")
                time.sleep(0.05)
            assert gauges(base_url)["flint:num_requests_running"] == NUM_STREAMS
        finally:
            for response, _ in streams:
                response.close()
