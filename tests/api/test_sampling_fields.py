"""Every field a dialect's registry marks as a sampling or stopping parameter reaches the
engine: sent through its route with a value of its own, it arrives in the engine Request's
SamplingParams (or StopCriteria) attribute that the table names. The values are derived from
the bounds SamplingParams and StopCriteria declare, so a new parameter is covered as soon as
it has its table entry and its declaration."""

from __future__ import annotations

import math

import pytest

from api.chat.route import CHAT
from api.completions.route import COMPLETIONS
from api.core.registry import Sampled
from api.messages.route import MESSAGES
from api.responses.route import RESPONSES
from engine.request import SamplingParams, StopCriteria
from engine.sampling.params import VocabSize, bounds_of

MODEL = "SmolLM2-135M-Instruct"
ROUTES = {
    "completions": ("/v1/completions", COMPLETIONS, {"prompt": "x", "max_tokens": 2}),
    "chat": ("/v1/chat/completions", CHAT, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                            "max_completion_tokens": 2}),
    "responses": ("/v1/responses", RESPONSES, {"model": MODEL, "input": "x", "max_output_tokens": 2}),
    "messages": ("/v1/messages", MESSAGES, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                           "max_tokens": 2}),
}


def engine_fields(name: str) -> list[tuple[str, str, bool]]:
    """(field, attribute, is a sampling parameter) of every engine field of a dialect."""
    _, dialect, _ = ROUTES[name]
    every_field = {field for model in dialect.models for field in model.model_fields}
    found = dialect.registry.engine_fields(dialect.models, every_field)
    return sorted((field, decision.attribute or field, isinstance(decision, Sampled))
                  for field, decision in found.items())


CASES = [(name, *field) for name in ROUTES for field in engine_fields(name)]


def test_every_dialect_has_engine_fields():
    assert {name for name, *_ in CASES} == set(ROUTES)
    assert ("completions", "min_tokens", "min_tokens", False) in CASES


def distinct_value(params_cls: type, attribute: str):
    """A value in the attribute's declared bounds that is not its default."""
    default = params_cls.__dataclass_fields__[attribute].default
    bounds = bounds_of(params_cls, attribute)
    if bounds is None:  # a flag
        return not default
    high = 40 if isinstance(bounds.high, VocabSize) or math.isinf(bounds.high) else bounds.high
    value = bounds.low + (high - bounds.low) * 0.375
    value = round(value) if bounds.integer else round(value, 3)
    return value if value != default else value + (1 if bounds.integer else 0.125)


@pytest.mark.parametrize("dialect, field, attribute, sampled", CASES,
                         ids=[f"{name}.{field}" for name, field, *_ in CASES])
def test_each_engine_field_reaches_the_engine(client, engine_requests, dialect, field, attribute, sampled):
    url, _, base = ROUTES[dialect]
    params_cls = SamplingParams if sampled else StopCriteria
    value = distinct_value(params_cls, attribute)
    response = client.post(url, json={**base, field: value})
    assert response.status_code == 200, response.text
    request = engine_requests[-1]
    assert getattr(request.sampling if sampled else request.stop, attribute) == value
