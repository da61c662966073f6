"""The weights routes (api/weights/route.py) over HTTP: a checkpoint folder served under a new
version, bad paths and mismatched shapes refused naming the path, requests in flight
drained or aborted with a clear error, sleep and wake with requests during sleep refused
503 with Retry-After, the prefix cache reset, and the routes off without the flag. A tiny
random model from a Hugging Face folder, served as `flint serve` serves one (float32: auto
quantizes GGUF files only); tokens against the NumPy forward of each weights."""

from __future__ import annotations

import dataclasses
import json
import threading

import httpx
import pytest
from api_helpers import ONE_BUCKET_ENGINE, live_app
from loader_files import write_hf
from numpy_reference import greedy

from api.server.app import create_app
from api.server.settings import Settings
from engine.config import AUTO
from engine.engine import Engine
from engine.models.params import random_params
from tiny_models import tiny_checkpoint

PROMPT = [5, 17, 3, 60, 22, 9, 41, 8, 13, 71, 2, 30]
MAX_TOKENS = 5
LONG = 120  # tokens of a stream still running when an update comes
served = {}  # the model's id, once the server is up


@pytest.fixture(scope="module")
def world(tmp_path_factory, smollm2_tokenizer):
    first, second = (tiny_checkpoint(smollm2_tokenizer.vocab_size, seed) for seed in (0, 1))
    root = tmp_path_factory.mktemp("weights")
    folders = {name: str(write_hf(root / name, checkpoint.config, checkpoint.params, "llama"))
               for name, checkpoint in (("first", first), ("second", second))}
    wider = first.config.replace(intermediate_size=96)  # the same architecture, another shape
    folders["wider"] = str(write_hf(root / "wider", wider, random_params(wider, seed=2), "llama"))

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(first, smollm2_tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    engine = dataclasses.replace(ONE_BUCKET_ENGINE, quantization=AUTO, max_model_len=256)
    app = create_app(Settings(engine=engine, allow_runtime_weights=True), engine_factory=engine_factory)
    with live_app(app) as base_url:
        served["model"] = app.state.server.model.id
        with httpx.Client(base_url=base_url, timeout=120) as client:
            yield client, folders, {"first": first, "second": second}, app, smollm2_tokenizer


def completion_text(client: httpx.Client, max_tokens: int = MAX_TOKENS) -> str:
    body = {"model": served["model"], "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def expected(world, name: str, max_tokens: int = MAX_TOKENS) -> str:
    checkpoint = world[2][name]
    return world[4].decode(greedy(checkpoint.config, checkpoint.params, PROMPT, max_tokens))


def update(client: httpx.Client, path: str, mode: str | None = None) -> httpx.Response:
    return client.post("/v1/update_weights", json={"path": path, **({"mode": mode} if mode else {})})


def test_a_checkpoint_folder_is_served_under_a_new_version(world):
    client, folders, *_ = world
    update(client, folders["first"])
    version = client.get("/v1/weights_version").json()["weights_version"]
    assert completion_text(client) == expected(world, "first")
    response = update(client, folders["second"])
    assert response.status_code == 200, response.text
    assert response.json() == {"weights_version": version + 1, "path": folders["second"]}
    assert client.get("/v1/weights_version").json()["weights_version"] == version + 1
    assert completion_text(client) == expected(world, "second")  # the same prompt: no stale prefix cache
    assert f"flint:weights_version {version + 1}.0" in client.get("/metrics").text


@pytest.mark.parametrize("body, message", [
    ({"path": "/no/such/folder"}, "path /no/such/folder does not exist"),
    ({"path": "WIDER"}, r"model.layers.0.mlp.gate_proj.weight.*has shape \(2, 96, 32\)|gate_proj"),
    ({"path": ""}, "path"),
    ({"path": "FIRST", "mode": "later"}, "mode"),
])
def test_bad_paths_and_mismatched_shapes_are_400s_naming_the_field(world, body, message):
    client, folders, *_ = world
    body = {**body, "path": {"WIDER": folders["wider"], "FIRST": folders["first"]}.get(body["path"], body["path"])}
    version = client.get("/v1/weights_version").json()["weights_version"]
    response = client.post("/v1/update_weights", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] in ("path", "mode") and error["param"] in message + "path mode"
    assert client.get("/v1/weights_version").json()["weights_version"] == version
    assert completion_text(client)  # still serving


def stream_in_background(client: httpx.Client) -> tuple[threading.Thread, dict, threading.Event]:
    """A greedy stream of LONG tokens; `seen` holds its text, finish reason and error,
    `started` is set at its first token."""
    seen, started = {"text": "", "error": None, "finish": None}, threading.Event()
    body = {"model": served["model"], "prompt": PROMPT, "max_tokens": LONG, "temperature": 0, "ignore_eos": True, "stream": True}

    def run():
        with client.stream("POST", "/v1/completions", json=body) as response:
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line.removeprefix("data: "))
                if "error" in event:
                    seen["error"] = event["error"]
                    continue
                choice = event["choices"][0]
                seen["text"] += choice.get("text", "")
                seen["finish"] = choice.get("finish_reason") or seen["finish"]
                started.set()
        started.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, seen, started


def update_during_a_stream(world, mode: str) -> dict:
    """The first weights served, a long stream started on them, the second weights posted
    with `mode` while it runs; what the stream saw, once it ended."""
    client, folders, *_ = world
    update(client, folders["first"])
    thread, seen, started = stream_in_background(client)
    assert started.wait(60)
    assert update(client, folders["second"], mode).status_code == 200
    thread.join(60)
    assert completion_text(client) == expected(world, "second")
    return seen


def test_drain_finishes_requests_in_flight_on_the_old_weights(world):
    seen = update_during_a_stream(world, "drain")
    assert seen["error"] is None and seen["finish"] == "length"
    assert seen["text"] == expected(world, "first", LONG)  # every token from the weights it started on


def test_abort_ends_requests_in_flight_with_a_clear_error(world):
    seen = update_during_a_stream(world, "abort")
    assert seen["finish"] is None and "aborted" in seen["error"]["message"]
    full = expected(world, "first", LONG)
    assert seen["text"] and full.startswith(seen["text"]) and seen["text"] != full


def test_requests_while_asleep_are_503s_with_retry_after_until_wake_up(world):
    client, folders, _, app, _ = world
    update(client, folders["second"])
    response = client.post("/sleep", params={"level": 2})
    assert response.status_code == 200, response.text
    state = response.json()
    assert state["is_sleeping"] and state["level"] == 2
    assert state["memory"]["process_resident_bytes"] > 0 and "memory_before" in state
    assert client.get("/is_sleeping").json()["is_sleeping"] is True
    refused = client.post("/v1/completions", json={"model": served["model"], "prompt": PROMPT, "max_tokens": 2})
    assert refused.status_code == 503 and refused.headers["Retry-After"]
    assert refused.json()["error"]["code"] == "sleeping"
    assert client.post("/sleep", params={"level": 3}).json()["error"]["param"] == "level"
    woken = client.post("/wake_up")
    assert woken.status_code == 200 and woken.json()["is_sleeping"] is False and woken.json()["level"] == 0
    assert completion_text(client) == expected(world, "second")  # the weights read again from their folder


def test_reset_prefix_cache_forgets_every_cached_page(world):
    client, _, _, app, _ = world
    completion_text(client)
    blocks = app.state.server.running_engine.engine.block_manager
    assert blocks.num_cached_pages > 0
    assert client.post("/reset_prefix_cache").status_code == 200
    assert blocks.num_cached_pages == 0


def test_the_routes_that_change_the_weights_are_off_without_the_flag(world, monkeypatch):
    client, folders, _, app, _ = world
    server = app.state.server
    monkeypatch.setattr(server, "settings", dataclasses.replace(server.settings, allow_runtime_weights=False))
    for path, body in (("/v1/update_weights", {"path": folders["first"]}), ("/sleep", None), ("/wake_up", None),
                       ("/reset_prefix_cache", None)):
        response = client.post(path, json=body)
        assert response.status_code == 403 and response.json()["error"]["code"] == "runtime_weights_disabled"
    assert client.get("/v1/weights_version").status_code == 200 and client.get("/is_sleeping").status_code == 200
