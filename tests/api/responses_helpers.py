"""Helpers for the Responses API tests: requests, named SSE parsing, the engine's own answers."""

from __future__ import annotations

import json

from chat_helpers import engine_outputs

from engine.host.request import Request, SamplingParams, StopCriteria

MODEL_ID = "SmolLM2-135M-Instruct"
URL = "/v1/responses"


def body(**fields) -> dict:
    """A Responses body: the served model, a short text input, short greedy answers by default."""
    return {"model": MODEL_ID, "input": "Say hi", "temperature": 0, "max_output_tokens": 6, **fields}


def create(client, **fields) -> dict:
    response = client.post(URL, json=body(**fields))
    assert response.status_code == 200, response.text
    return response.json()


def refusal(client, status: int, **fields) -> dict:
    """The error of a request that must fail with `status`."""
    response = client.post(URL, json=body(**fields))
    assert response.status_code == status, response.text
    return response.json()


def named_events(text: str) -> list[dict]:
    """The events of a named SSE body; each `event:` line must equal its data's type."""
    events = []
    for frame in (frame for frame in text.split("\n\n") if frame):
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        event = json.loads(data_line[len("data: "):])
        assert event["type"] == name_line[len("event: "):]
        events.append(event)
    return events


def stream(client, **fields) -> list[dict]:
    response = client.post(URL, json=body(stream=True, **fields))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return named_events(response.text)


def greedy_text(client, prompt_ids: list[int], max_tokens: int) -> str:
    """The engine's own greedy continuation of `prompt_ids`."""
    request = Request("reference", prompt_ids, SamplingParams(temperature=0), StopCriteria(max_tokens=max_tokens))
    return "".join(out.text for out in engine_outputs(client, request))


def output_text(response: dict) -> str:
    [message] = response["output"]
    return "".join(part["text"] for part in message["content"])
