"""Helpers for the /v1/messages tests: bodies, Anthropic's named SSE events, engine requests."""

from __future__ import annotations

import json


MODEL_ID = "SmolLM2-135M-Instruct"
URL = "/v1/messages"
USER_HI = [{"role": "user", "content": "Say hi"}]


def body(**fields) -> dict:
    """A Messages body: the served model, one user message, short greedy replies by default."""
    return {"model": MODEL_ID, "messages": USER_HI, "max_tokens": 6, "temperature": 0, **fields}


def create(client, **fields) -> dict:
    response = client.post(URL, json=body(**fields))
    assert response.status_code == 200, response.text
    return response.json()


def named_events(text: str) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE event; every event names its data's `type`."""
    events = []
    for block in (block for block in text.split("\n\n") if block):
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: "), block
        name, data = name_line[len("event: "):], json.loads(data_line[len("data: "):])
        assert data["type"] == name
        events.append((name, data))
    return events


def stream(client, **fields) -> list[tuple[str, dict]]:
    response = client.post(URL, json=body(stream=True, **fields))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return named_events(response.text)


def anthropic_error(response, status: int) -> dict:
    """The `error` of an Anthropic-shaped error body with `status`."""
    assert response.status_code == status, response.text
    payload = response.json()
    assert payload["type"] == "error" and set(payload) <= {"type", "error", "request_id"}
    assert set(payload["error"]) == {"type", "message"}
    return payload["error"]
