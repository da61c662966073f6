"""Generations cut off (shutdown's timeout ran out): one that starts afterwards ends at once
with a 503 in its dialect's shape, whole or streamed, and gives its admission back. The
streams cut off mid-way, against a real `flint serve`, are in tests/e2e/test_shutdown.py."""

from __future__ import annotations

import pytest

import chat_helpers
import messages_helpers
import responses_helpers

MODEL_ID = chat_helpers.MODEL_ID
BODIES = {
    "/v1/completions": {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 4},
    chat_helpers.URL: chat_helpers.body(),
    responses_helpers.URL: responses_helpers.body(store=False),
    messages_helpers.URL: messages_helpers.body(),
}


@pytest.fixture
def cut_off(shared_tiny_client):
    server = shared_tiny_client.app.state.server
    server.generations_cut_off = True
    try:
        yield shared_tiny_client
    finally:
        server.generations_cut_off = False


def error_code(path: str, answer: dict) -> str:
    if path == messages_helpers.URL:
        assert answer["type"] == "error"
        return answer["error"]["type"]
    return answer["error"]["code"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(BODIES))
def test_a_generation_after_the_cut_off_is_a_503(cut_off, path, stream):
    response = cut_off.post(path, json={**BODIES[path], "stream": stream})
    assert response.status_code == 503, response.text
    assert error_code(path, response.json()) == ("overloaded_error" if path == messages_helpers.URL else "cut_off")
    assert cut_off.app.state.server.num_admitted_choices == 0
    assert not cut_off.app.state.server.open_generations


def test_generations_run_again_once_the_flag_is_down(shared_tiny_client):
    """The control: the same request, not cut off, is answered."""
    assert shared_tiny_client.post(chat_helpers.URL, json=chat_helpers.body()).status_code == 200
