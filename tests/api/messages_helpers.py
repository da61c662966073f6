"""Helpers for the /v1/messages tests: bodies, Anthropic's named SSE events, engine requests."""

from __future__ import annotations

import json

import httpx2


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


class AppTransport(httpx2.BaseTransport):
    """Sends each of the `anthropic` SDK's requests through the test client, as it is, and
    hands back the app's answer."""

    def __init__(self, client) -> None:
        self.client = client

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = self.client.request(request.method, str(request.url), headers=list(request.headers.multi_items()),
                                     content=request.read())
        return httpx2.Response(answer.status_code, headers=list(answer.headers.multi_items()),
                               content=answer.content, request=request)
