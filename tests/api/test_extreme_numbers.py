"""No number takes the server down: every numeric field of every dialect's request body,
given ±1e308, NaN, ±Infinity (JSON parsers let the last three through), huge integers and
whatever else Hypothesis draws, answers a 4xx or a normal answer, and the engine serves on.
Each field is tried in the contexts that reach the most engine math: plain sampling, beam
search, speculation (a predicted output), Mirostat, and a grammar.

(A beam search's length_penalty of 1e300 once overflowed in the engine thread and stopped
the server: that is the first case below.)"""

from __future__ import annotations

import json
import types
import typing

import pydantic
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from api.chat.body import ChatCompletionBody
from api.completions.body import CompletionsBody
from api.messages.body import MessagesBody
from api.responses.body import CreateResponseRequest

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
EXTREMES = (1e308, -1e308, float("nan"), float("inf"), float("-inf"), 2**64, -(2**63), 1e-308, -1)

# route -> (the dialect's body model, its contexts: name -> base body)
DIALECTS = {
    "/v1/completions": (CompletionsBody, {
        "plain": {"prompt": "Hello", "max_tokens": 3, "temperature": 0},
        "beams": {"prompt": "Hello", "max_tokens": 3, "num_beams": 2},
        "speculation": {"prompt": "Hello", "max_tokens": 3, "temperature": 0, "prediction": "Hello there"},
        "mirostat": {"prompt": "Hello", "max_tokens": 3, "mirostat_target": 3.0},
        "grammar": {"prompt": "Hello", "max_tokens": 3, "response_format": {"type": "json_object"}},
    }),
    "/v1/chat/completions": (ChatCompletionBody, {
        "plain": {"messages": USER, "max_tokens": 3, "temperature": 0},
        "speculation": {"messages": USER, "max_tokens": 3, "prediction": {"type": "content", "content": "Hi!"}},
        "mirostat": {"messages": USER, "max_tokens": 3, "mirostat_target": 3.0},
        "grammar": {"messages": USER, "max_tokens": 3,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}},
    }),
    "/v1/responses": (CreateResponseRequest, {
        "plain": {"input": "Hi", "max_output_tokens": 16, "temperature": 0},
        "grammar": {"input": "Hi", "max_output_tokens": 16,
                    "text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}}},
    }),
    "/v1/messages": (MessagesBody, {
        "plain": {"messages": USER, "max_tokens": 3, "temperature": 0},
        "tools": {"messages": USER, "max_tokens": 3, "tool_choice": {"type": "any"},
                  "tools": [{"name": "f", "input_schema": SCHEMA}]},
    }),
}
# Numbers inside objects, with the object around them: (route, field, value -> field's value).
NESTED = [
    ("/v1/completions", "logit_bias", lambda value: {"5": value}),
    ("/v1/chat/completions", "logit_bias", lambda value: {"5": value}),
    ("/v1/chat/completions", "stream_options", lambda value: {"include_usage": True, "bogus": value}),
]


def is_numeric(annotation) -> bool:
    """Whether a field's type admits a JSON number (not a bool alone)."""
    if annotation in (int, float):
        return True
    if isinstance(annotation, type) and issubclass(annotation, pydantic.RootModel):
        return is_numeric(annotation.model_fields["root"].annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return is_numeric(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(is_numeric(arg) for arg in typing.get_args(annotation))
    return False


def list_depth(annotation) -> int:
    """How many lists deep a field's type holds numbers (0: none, or not in a list)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return list_depth(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return max((list_depth(arg) for arg in typing.get_args(annotation)), default=0)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return 1 if is_numeric(item) else (1 + inner if (inner := list_depth(item)) else 0)
    return 0


def numeric_fields(model: type[pydantic.BaseModel]) -> list[str]:
    return sorted(name for name, info in model.model_fields.items() if is_numeric(info.annotation))


def numeric_list_fields(model: type[pydantic.BaseModel]) -> list[tuple[str, int]]:
    """(field, depth) of each field that holds numbers in lists (token ids, seeds, embeddings)."""
    return sorted((name, depth) for name, info in model.model_fields.items() if (depth := list_depth(info.annotation)))


CASES = [(route, field) for route, (model, _) in DIALECTS.items() for field in numeric_fields(model)]
LIST_CASES = [(route, field, depth) for route, (model, _) in DIALECTS.items()
              for field, depth in numeric_list_fields(model)]


def post(client, route: str, body: dict):
    """`body` as JSON with NaN and Infinity written as Python's json writes them."""
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    return client.post(route, content=json.dumps({"model": MODEL, **body}), headers=headers)


def assert_served_or_refused(client, route: str, body: dict, field: str | None = None) -> None:
    """A normal answer, or a 4xx whose error names `field` (the one given an extreme value)."""
    answer = post(client, route, body)
    assert answer.status_code < 500, (route, body, answer.status_code, answer.text[:300])
    if answer.status_code >= 400 and field is not None:
        assert field in answer.text, (route, body, answer.text[:300])


def assert_still_serving(client) -> None:
    assert client.get("/health").status_code == 200
    assert client.app.state.server.running_engine.is_alive
    answer = post(client, "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2


def test_the_reported_request_is_a_400_naming_length_penalty(client):
    answer = post(client, "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "num_beams": 2,
                                               "length_penalty": 1e300})
    assert answer.status_code in (400, 422) and "length_penalty" in answer.text
    assert_still_serving(client)


def test_every_dialect_has_numeric_fields_to_try():
    fields = {route: [field for r, field in CASES if r == route] for route in DIALECTS}
    assert {"temperature", "top_p", "max_tokens", "length_penalty", "mirostat_target"} <= set(fields["/v1/completions"])
    assert {"temperature", "frequency_penalty", "top_logprobs"} <= set(fields["/v1/chat/completions"])
    assert {"temperature", "max_output_tokens"} <= set(fields["/v1/responses"])
    assert {"temperature", "top_k", "max_tokens"} <= set(fields["/v1/messages"])


@pytest.mark.parametrize("route, field", CASES, ids=[f"{route}:{field}" for route, field in CASES])
def test_extreme_values_of_every_numeric_field(client, route, field):
    for context in DIALECTS[route][1].values():
        for value in EXTREMES:
            assert_served_or_refused(client, route, {**context, field: value}, field)
    assert_still_serving(client)


@pytest.mark.parametrize("route, field, wrap", NESTED, ids=[f"{route}:{field}" for route, field, _ in NESTED])
def test_extreme_values_inside_objects(client, route, field, wrap):
    for context in DIALECTS[route][1].values():
        for value in EXTREMES:
            assert_served_or_refused(client, route, {**context, field: wrap(value)}, field)
    assert_still_serving(client)


@pytest.mark.parametrize("route, field, depth", LIST_CASES, ids=[f"{route}:{field}" for route, field, _ in LIST_CASES])
def test_extreme_values_inside_lists(client, route, field, depth):
    for context in DIALECTS[route][1].values():
        for value in EXTREMES:
            nested = value
            for _ in range(depth):
                nested = [nested]
            assert_served_or_refused(client, route, {**context, field: nested}, field)
    assert_still_serving(client)


# A reasoning model's thinking budgets (the tiny Qwen3-style app of tests/api/conftest.py).
THINKING = [
    ("/v1/messages", {"messages": USER, "max_tokens": 8}, "thinking",
     lambda value: {"type": "enabled", "budget_tokens": value}),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 8}, "reasoning_effort", lambda value: value),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 8}, "thinking",
     lambda value: {"type": "enabled", "budget_tokens": value}),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 8}, "reasoning_effort", lambda value: value),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 8}, "thinking",
     lambda value: {"type": "enabled", "budget_tokens": value}),
]


@pytest.mark.parametrize("route, context, field, wrap", THINKING, ids=[f"{r}:{f}" for r, _, f, _ in THINKING])
def test_extreme_thinking_budgets(qwen3_client, route, context, field, wrap):
    for value in EXTREMES:
        assert_served_or_refused(qwen3_client, route, {**context, field: wrap(value)}, field)
    assert qwen3_client.get("/health").status_code == 200
    assert qwen3_client.app.state.server.running_engine.is_alive


NUMBERS = st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=-(2**80), max_value=2**80))


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), context=st.integers(0, 4), value=NUMBERS, second=st.sampled_from(CASES),
       second_value=NUMBERS)
@example(case=("/v1/completions", "length_penalty"), context=1, value=1e300,
         second=("/v1/completions", "temperature"), second_value=float("nan"))
def test_any_two_numbers_in_any_context(client, case, context, value, second, second_value):
    route, field = case
    contexts = list(DIALECTS[route][1].values())
    body = {**contexts[context % len(contexts)], field: value}
    if second[0] == route:
        body[second[1]] = second_value
    assert_served_or_refused(client, route, body)
    assert client.app.state.server.running_engine.is_alive
