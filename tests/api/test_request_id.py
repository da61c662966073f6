"""X-Request-Id on every answer: routed or not, refused or served, whole or streamed; a
client's sane id echoed, anything else replaced by a new one."""

from __future__ import annotations

import re
import time

import pytest
from chat_helpers import body as chat_body
from litestar.testing import TestClient

from api.server.app import create_app
from api.server.request_id import MAX_LENGTH, chosen_request_id
from api.server.settings import Settings

NEW_ID = re.compile(r"[0-9a-f]{32}")
API_KEY = "test-key"


def no_engine(_settings):
    raise RuntimeError("this app serves no engine: its API answers 503")


@pytest.fixture(scope="module")
def failed_client():
    """An app that wants an API key and whose engine failed to load: no compile, every
    refusal at hand (401 without the key, 503 with it)."""
    with TestClient(app=create_app(Settings(api_key=API_KEY), engine_factory=no_engine)) as client:
        deadline = time.monotonic() + 30
        while client.get("/health").json()["status"] != "failed":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield client


def authorized(headers: dict[str, str] | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}", **(headers or {})}


def answers(client: TestClient, headers: dict[str, str] | None = None) -> dict[str, object]:
    """One answer of every kind the app gives without an engine, by what it is."""
    return {"not found": client.get("/no/such/path", headers=headers),
            "wrong method": client.put("/health", headers=headers),
            "no api key": client.get("/v1/models", headers=headers),
            "not serving": client.get("/v1/models", headers=authorized(headers)),
            "health": client.get("/health", headers=headers),
            "metrics": client.get("/metrics", headers=headers)}


def test_every_answer_carries_a_new_id(failed_client):
    by_kind = answers(failed_client)
    assert [response.status_code for response in by_kind.values()] == [404, 405, 401, 503, 503, 200]
    ids = [response.headers.get("x-request-id") for response in by_kind.values()]
    assert all(request_id and NEW_ID.fullmatch(request_id) for request_id in ids), ids
    assert len(set(ids)) == len(ids)


def test_a_clients_id_is_echoed(failed_client):
    for kind, response in answers(failed_client, {"X-Request-Id": "trace-7f3a/retry:2"}).items():
        assert response.headers["x-request-id"] == "trace-7f3a/retry:2", kind


@pytest.mark.parametrize("bad", ["", "two words", "tab\tinside", "x" * (MAX_LENGTH + 1), "caf\u00e9"])
def test_an_insane_id_is_replaced(failed_client, bad):
    response = failed_client.get("/no/such/path", headers={"X-Request-Id": bad.encode("latin-1")})
    assert NEW_ID.fullmatch(response.headers["x-request-id"])


def test_the_first_header_counts_whatever_its_case():
    assert chosen_request_id([(b"X-REQUEST-ID", b"first"), (b"x-request-id", b"second")]) == ("first", False)
    request_id, made_here = chosen_request_id([(b"x-request-id", b"bad id"), (b"x-request-id", b"good")])
    assert made_here and NEW_ID.fullmatch(request_id)
    assert chosen_request_id([(b"x-request-id", b"x" * MAX_LENGTH)]) == ("x" * MAX_LENGTH, False)


CHAT = chat_body(max_completion_tokens=3)


def test_a_stream_carries_the_id(shared_tiny_client):
    with shared_tiny_client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True},
                                   headers={"X-Request-Id": "stream-1"}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-request-id"] == "stream-1"
        lines = list(response.iter_lines())
    assert "data: [DONE]" in lines


def test_flints_own_id_names_the_generation(shared_tiny_client):
    """When Flint made the id it is unique, so the answer's own id is built from it; a
    client's id is only echoed (two requests in flight may share one)."""
    made_here = shared_tiny_client.post("/v1/chat/completions", json=CHAT)
    assert made_here.json()["id"] == f"chatcmpl-{made_here.headers['x-request-id']}"
    chosen = shared_tiny_client.post("/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "mine"})
    assert chosen.headers["x-request-id"] == "mine"
    assert chosen.json()["id"].startswith("chatcmpl-") and "mine" not in chosen.json()["id"]
