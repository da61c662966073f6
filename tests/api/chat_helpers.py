"""Helpers for the chat completion tests: requests, SSE parsing, running the engine directly."""

from __future__ import annotations

import json

from engine.host.request import Request, RequestOutput

MODEL_ID = "SmolLM2-135M-Instruct"
URL = "/v1/chat/completions"
USER_HI = [{"role": "user", "content": "Say hi"}]


def body(**fields) -> dict:
    """A chat body: the served model, one user message, short greedy replies by default."""
    return {"model": MODEL_ID, "messages": USER_HI, "temperature": 0, "max_completion_tokens": 6, **fields}


def chat(client, **fields) -> dict:
    response = client.post(URL, json=body(**fields))
    assert response.status_code == 200, response.text
    return response.json()


def sse_payloads(text: str) -> list[dict | str]:
    """The `data:` payloads of an SSE body, JSON decoded except the final [DONE]."""
    events = [event for event in text.split("\n\n") if event]
    assert all(event.startswith("data: ") for event in events)
    return [event[6:] if event == "data: [DONE]" else json.loads(event[6:]) for event in events]


def stream(client, **fields) -> list[dict]:
    response = client.post(URL, json=body(stream=True, **fields))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    return payloads[:-1]


def engine_outputs(client, request: Request) -> list[RequestOutput]:
    """Run `request` on the app's engine directly (on the app's event loop)."""
    engine = client.app.state.server.running_engine

    async def run() -> list[RequestOutput]:
        return [output async for output in engine.generate(request)]

    return client.blocking_portal.call(run)
