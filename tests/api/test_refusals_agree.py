"""The dialects agree on what they cannot serve: a value that asks for nothing is accepted by
every dialect that has the field, and a value that asks for an unserved feature is refused
by each with the same reason (api/core/refusals.py). The app's model does not reason, so
every dialect refuses reasoning with the same words, served or not."""

from __future__ import annotations

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
    ("completions", "service_tier", "default", "priority", "default service tier"),
    ("chat", "service_tier", "auto", "priority", "default service tier"),
    ("responses", "service_tier", "default", "flex", "default service tier"),
]
IDS = [f"{dialect}.{field}={refused!r}" for dialect, field, _, refused, _ in CASES]


@pytest.mark.parametrize("dialect, field, accepted, refused, reason", CASES, ids=IDS)
def test_the_no_op_value_is_served(client, dialect, field, accepted, refused, reason):
    url, base = BASES[dialect]
    response = client.post(url, json={**base, field: accepted})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("dialect, field, accepted, refused, reason", CASES, ids=IDS)
def test_the_feature_is_refused_with_the_shared_reason(client, dialect, field, accepted, refused, reason):
    url, base = BASES[dialect]
    response = client.post(url, json={**base, field: refused})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert f"`{field}" in message and reason in message, message
