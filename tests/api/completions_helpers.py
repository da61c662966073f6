"""Helpers for the /v1/completions tests on the tiny-model app."""

from __future__ import annotations

import json

MODEL = "SmolLM2-135M-Instruct"


def complete(client, path: str = "/v1/completions", **body) -> dict:
    """POST a completion that must succeed; its JSON body."""
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def greedy(client, prompt=None, max_tokens: int = 8, **body) -> dict:
    """The first choice of a greedy completion that ignores EOS (so its length is known);
    the prompt may come in `body` instead (as `tokens`, say)."""
    if prompt is not None:
        body["prompt"] = prompt
    return complete(client, max_tokens=max_tokens, temperature=0, ignore_eos=True, **body)["choices"][0]


def stream_events(client, **body) -> list[dict]:
    """The JSON payloads of a streamed completion, checking the [DONE] terminator."""
    response = client.post("/v1/completions", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = response.text.split("\n\n")
    assert frames[-2:] == ["data: [DONE]", ""]
    assert all(frame.startswith("data: ") for frame in frames[:-1])
    return [json.loads(frame[len("data: "):]) for frame in frames[:-2]]


def server_state(client):
    return client.app.state.server
