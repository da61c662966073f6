"""The dialects agree on what they cannot serve: a value that asks for nothing is accepted by
every dialect that has the field, and a value that asks for an unserved feature is refused
by each with the same reason (api/core/refusals.py). The app's model does not reason, so
every dialect refuses reasoning with the same words, served or not."""

from __future__ import annotations

import dataclasses

import pytest

from api.core import refusals

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "hi"}]
BASES = {
    "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    "chat": ("/v1/chat/completions", {"model": MODEL, "messages": USER, "max_completion_tokens": 1}),
    "responses": ("/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 16}),
    "messages": ("/v1/messages", {"model": MODEL, "messages": USER, "max_tokens": 1}),
}
# (dialect, field, a value that asks for nothing, a value that asks for the feature, its reason)
CASES = [
    ("completions", "reasoning_effort", "none", "high", refusals.NOT_REASONING),
    ("chat", "reasoning_effort", "none", "high", refusals.NOT_REASONING),
    ("responses", "reasoning", {"effort": "none"}, {"effort": "high"}, refusals.NOT_REASONING),
    ("completions", "thinking", {"type": "disabled"}, {"type": "enabled"}, refusals.NOT_REASONING),
    ("chat", "thinking", {"type": "disabled"}, {"type": "enabled"}, refusals.NOT_REASONING),
    ("messages", "thinking", {"type": "disabled"}, {"type": "enabled", "budget_tokens": 2048},
     refusals.NOT_REASONING),
    ("completions", "reasoning_history", "disabled", "preserved", refusals.NOT_REASONING),
    ("chat", "reasoning_history", "disabled", "preserved", refusals.NOT_REASONING),
]
IDS = [f"{dialect}.{field}={refused!r}" for dialect, field, _, refused, _ in CASES]


# Greedy and several tokens long, so that two answers agree only when the same prompt was sampled
# the same way.
GREEDY = {"completions": {"temperature": 0, "max_tokens": 8},
          "chat": {"temperature": 0, "max_completion_tokens": 8},
          "responses": {"temperature": 0},
          "messages": {"temperature": 0, "max_tokens": 8}}


def answer(dialect: str, body: dict) -> tuple:
    """What the model said in a dialect's whole response, and why it stopped."""
    if dialect == "completions":
        choice = body["choices"][0]
        return choice["text"], choice["finish_reason"]
    if dialect == "chat":
        choice = body["choices"][0]
        return choice["message"]["content"], choice["finish_reason"]
    if dialect == "responses":
        texts = [part["text"] for item in body["output"] if item["type"] == "message"
                 for part in item["content"] if part["type"] == "output_text"]
        return "".join(texts), body["status"]
    return "".join(block["text"] for block in body["content"] if block["type"] == "text"), body["stop_reason"]


def as_sampled(request):
    """An engine request without what differs between any two requests: its id and the seed
    the server drew (greedy sampling ignores it)."""
    return dataclasses.replace(request, request_id="", sampling=dataclasses.replace(request.sampling, seed=None))


def served(client, url: str, body: dict) -> dict:
    response = client.post(url, json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("dialect, field, accepted, refused, reason", CASES, ids=IDS)
def test_the_no_op_value_is_served(client, engine_requests, dialect, field, accepted, refused, reason):
    """Served exactly as without the field: the same engine request (prompt, sampling, stops,
    reasoning) and the same greedy answer."""
    url, base = BASES[dialect]
    plain = {**base, **GREEDY[dialect]}
    without, with_field = served(client, url, plain), served(client, url, {**plain, field: accepted})
    assert answer(dialect, with_field) == answer(dialect, without)
    assert len(engine_requests) == 2
    request_without, request_with = map(as_sampled, engine_requests)
    assert request_with == request_without


@pytest.mark.parametrize("dialect, field, accepted, refused, reason", CASES, ids=IDS)
def test_the_feature_is_refused_with_the_shared_reason(client, dialect, field, accepted, refused, reason):
    url, base = BASES[dialect]
    response = client.post(url, json={**base, field: refused})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert f"`{field}" in message and reason in message, message
