"""API keys (401), body size (413), queue limits (429), starting/draining/failed (503)."""

from __future__ import annotations

import time

import pytest
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from litestar.testing import TestClient

from api.core.admission import admit
from api.core.errors import ApiError
from api.core.state import ServerState
from api.server.app import create_app
from api.server.settings import Settings
from engine.config import EngineConfig
from engine.loader.source import resolve_model
from generated.flint import ErrorResponse

KEY = "sk-flint-test-key"
BODY_LIMIT = 4096


@pytest.fixture(scope="module")
def client(tiny_app_factory):
    settings = Settings(engine=ONE_BUCKET_ENGINE, api_key=KEY, max_body_bytes=BODY_LIMIT)
    with TestClient(app=tiny_app_factory(settings)) as client:
        wait_until_serving(client)
        yield client


def error_of(response, status: int):
    assert response.status_code == status, response.text
    return ErrorResponse.model_validate(response.json()).error


@pytest.mark.parametrize("prefix", ["/v1", "/inference/v1"])
def test_a_missing_key_is_401(client, prefix):
    response = client.get(f"{prefix}/models")
    error = error_of(response, 401)
    assert error.type == "invalid_request_error" and error.code is None and "API key" in error.message
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {KEY}x"},
    {"x-api-key": "wrong"},
])
def test_a_wrong_key_is_401(client, headers):
    assert error_of(client.get("/v1/models", headers=headers), 401).code == "invalid_api_key"


def test_a_key_without_the_bearer_scheme_is_not_taken(client):
    assert error_of(client.get("/v1/models", headers={"Authorization": KEY}), 401).code is None


@pytest.mark.parametrize("headers", [
    {"Authorization": f"Bearer {KEY}"},  # the OpenAI SDK
    {"authorization": f"bearer {KEY}"},
    {"x-api-key": KEY},  # the Anthropic SDK
])
def test_the_right_key_is_accepted(client, headers):
    assert client.get("/v1/models", headers=headers).status_code == 200
    response = client.post("/v1/tokenize", json={"prompt": "Hi"}, headers=headers)
    assert response.status_code == 200


def test_health_and_metrics_need_no_key(client):
    assert client.get("/health").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_a_body_over_the_limit_is_413(client):
    headers = {"Authorization": f"Bearer {KEY}"}
    error = error_of(client.post("/v1/tokenize", json={"prompt": "a" * BODY_LIMIT}, headers=headers), 413)
    assert error.type == "invalid_request_error"
    small = client.post("/v1/tokenize", json={"prompt": "a" * (BODY_LIMIT - 100)}, headers=headers)
    assert small.status_code == 200


def test_draining_answers_503(client):
    server = client.app.state.server
    client.app.state.lifecycle.drain()
    try:
        error = error_of(client.get("/v1/models", headers={"x-api-key": KEY}), 503)
        assert error.code == "draining"
        assert client.get("/health").json()["status"] == "draining"
    finally:
        server.phase = "ok"


def test_starting_answers_503_with_retry_after():
    client = TestClient(app=create_app(Settings()))  # no lifespan: the engine never loads
    for path in ("/v1/models", "/inference/v1/models"):
        response = client.get(path)
        assert error_of(response, 503).code == "starting"
        assert int(response.headers["retry-after"]) > 0
    tokenize = client.post("/v1/tokenize", json={"prompt": "Hi"})
    assert error_of(tokenize, 503).code == "starting"
    assert client.get("/metrics").status_code == 200


def test_a_failed_load_says_so():
    def fail(_: Settings):
        raise MemoryError("out of memory while loading")

    app = create_app(Settings(), engine_factory=fail)
    with TestClient(app=app) as client:
        deadline = time.monotonic() + 30
        while (health := client.get("/health")).json()["status"] == "starting":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert health.status_code == 503 and health.json() == {"status": "failed"}
        assert error_of(client.get("/v1/models"), 503).code == "failed"
        assert isinstance(app.state.lifecycle.error, MemoryError)


def server_with(num_admitted: int, max_waiting: int, max_num_seqs: int = 2) -> ServerState:
    """A serving ServerState whose API has admitted `num_admitted` engine requests."""
    engine_config = EngineConfig(max_model_len=64, max_num_seqs=max_num_seqs, max_num_batched_tokens=8,
                                 num_pages=16)
    settings = Settings(engine=engine_config, max_waiting=max_waiting)
    server = ServerState(model=resolve_model(None), settings=settings, phase="ok")
    server.num_admitted_choices = num_admitted
    return server


def test_a_full_queue_is_429_with_retry_after():
    with pytest.raises(ApiError) as refused:
        admit(server_with(5, max_waiting=3), 1)  # 2 running and 3 waiting already
    assert refused.value.status_code == 429 and refused.value.headers["Retry-After"] == "1"
    assert refused.value.body.error.code == "rate_limit_exceeded"
    # Admission counts the engine requests a request makes (prompts x n), not HTTP requests.
    with pytest.raises(ApiError):
        admit(server_with(2, max_waiting=3), 4)


def test_a_queue_below_the_limit_admits():
    server = server_with(4, max_waiting=3)
    admit(server, 1)
    assert server.num_admitted_choices == 5
    # With no queue allowed, a request that fits the running batch is still served.
    admit(server_with(1, max_waiting=0), 1)
    with pytest.raises(ApiError):
        admit(server_with(2, max_waiting=0), 1)
    # An idle server takes a request however many choices it makes.
    idle = server_with(0, max_waiting=0)
    admit(idle, 128)
    assert idle.num_admitted_choices == 128
