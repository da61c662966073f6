"""Malformed and unservable /v1/completions bodies: each gets its documented 4xx naming the
field (422 `loc` for schema violations, 400 `param` for values the server cannot honour),
and the server goes on serving."""

from __future__ import annotations

import dataclasses

import pytest

from completions_helpers import MODEL, complete, greedy, server_state


OK = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
TOO_LONG = list(range(1, 300))  # over the tiny app's 256-token window

# (body changes, status, the field the error must name). None as a value removes the key.
CASES = [
    # Schema violations: 422 with loc ["body", field, ...].
    ({"prompt": None}, 422, "prompt"),
    ({"prompt": 5}, 422, "prompt"),
    ({"prompt": [1, "a"]}, 422, "prompt"),
    ({"prompt": {"text": "x"}}, 422, "prompt"),
    ({"n": "many"}, 422, "n"),
    ({"n": 1.5}, 422, "n"),
    ({"temperature": "hot"}, 422, "temperature"),
    ({"max_tokens": "ten"}, 422, "max_tokens"),
    ({"stop": 7}, 422, "stop"),
    ({"stop": [1, 2]}, 422, "stop"),
    ({"seed": "abc"}, 422, "seed"),
    ({"logprobs": "many"}, 422, "logprobs"),
    ({"logit_bias": [1, 2]}, 422, "logit_bias"),
    ({"stream": "sometimes"}, 422, "stream"),
    ({"echo": [True]}, 422, "echo"),
    ({"unknown_field": 1}, 422, "unknown_field"),
    ({"messages": [{"role": "user", "content": "hi"}]}, 422, "messages"),
    ({"context_length_exceeded_behavior": "explode"}, 422, "context_length_exceeded_behavior"),
    ({"timeout": 0}, 422, "timeout"),
    ({"stream_options": {"include_usage": "maybe"}, "stream": True}, 422, "stream_options"),
    ({"tokens": "1 2 3", "prompt": None}, 422, "tokens"),
    # Values out of range or unservable: 400 with param = field.
    ({"n": 0}, 400, "n"),
    ({"n": 129}, 400, "n"),
    ({"temperature": 3}, 400, "temperature"),
    ({"temperature": -0.1}, 400, "temperature"),
    ({"top_p": 1.5}, 400, "top_p"),
    ({"top_k": -2}, 400, "top_k"),
    ({"top_k": 10**7}, 400, "top_k"),
    ({"min_p": 2}, 400, "min_p"),
    ({"typical_p": -1}, 400, "typical_p"),
    ({"repetition_penalty": 0}, 400, "repetition_penalty"),
    ({"repetition_penalty": 2.5}, 400, "repetition_penalty"),
    ({"frequency_penalty": 3}, 400, "frequency_penalty"),
    ({"presence_penalty": -2.5}, 400, "presence_penalty"),
    ({"xtc_probability": 1.5}, 400, "xtc_probability"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"stop": [""]}, 400, "stop"),
    ({"max_tokens": 5, "max_completion_tokens": 5}, 400, "max_completion_tokens"),
    ({"max_tokens": 5, "max_total_tokens": 50}, 400, "max_total_tokens"),
    ({"max_tokens": None, "max_total_tokens": 1}, 400, "max_total_tokens"),
    ({"min_tokens": 1, "min_total_tokens": 5}, 400, "min_total_tokens"),
    ({"max_tokens": -1}, 400, "max_tokens"),
    ({"model": "not-this-model"}, 404, "model"),
    ({"prompt": TOO_LONG, "context_length_exceeded_behavior": "error"}, 400, "prompt"),
    ({"prompt": TOO_LONG}, 400, "prompt"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": [10**8]}, 400, "prompt"),
    ({"tokens": [1, 2]}, 400, "tokens"),
    ({"seed": [1, 2], "n": 3}, 400, "seed"),
    ({"seed": -5}, 400, "seed"),
    ({"logprobs": 21}, 400, "logprobs"),
    ({"logprobs": True, "top_logprobs": 30}, 400, "top_logprobs"),
    ({"top_logprobs": 2}, 400, "top_logprobs"),
    ({"logit_bias": {"1": 101}}, 400, "logit_bias"),
    ({"logit_bias": {"dog": 1}}, 400, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, 400, "logit_bias"),
    ({"logit_bias": {str(i): 1 for i in range(301)}}, 400, "logit_bias"),
    ({"forced_output_tokens": [-1]}, 400, "forced_output_tokens"),
    ({"echo_last": -1}, 400, "echo_last"),
    ({"stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"response_format": {"type": "regex", "schema": "(a"}}, 400, "response_format.schema"),
    ({"embedding_to_replace": [0.1], "token_index_to_replace": [0]}, 400, "embedding_to_replace"),  # not hidden size
    # Refused features: 400 naming the field.
    ({"images": ["data:image/png;base64,AAAA"]}, 400, "images"),
    ({"reasoning_effort": "high"}, 400, "reasoning_effort"),
    ({"thinking": {"type": "enabled"}}, 400, "thinking"),
    ({"num_beams": 4, "stream": True}, 400, "stream"),  # beam search is not streamed (seed 004)
    ({"length_penalty": 2.0}, 400, "length_penalty"),  # only for beam search
    ({"encoder_repetition_penalty": 1.1}, 400, "encoder_repetition_penalty"),
    ({"best_of": 3}, 400, "best_of"),
    ({"suffix": "the end"}, 400, "suffix"),
]


def body_with(changes: dict) -> dict:
    body = {**OK, **changes}
    return {key: value for key, value in body.items() if value is not None}


def blamed_field(response) -> str:
    payload = response.json()
    if response.status_code == 422:  # the Fireworks spec's shape, with OpenAI's error object beside it
        (first, *_) = payload["detail"]
        assert first["loc"][0] == "body" and first["msg"] and first["type"]
        field = first["loc"][1] if len(first["loc"]) > 1 else None
        error = payload["error"]
        assert error["type"] == "invalid_request_error" and error["message"]
        assert (error["param"] or "").split(".")[0] == (field or "")
        return field
    error = payload["error"]
    assert error["message"] and error["type"]
    return error["param"]


@pytest.mark.parametrize("changes, status, field", CASES, ids=[f"{i}-{c[2]}" for i, c in enumerate(CASES)])
def test_a_bad_body_gets_its_4xx_naming_the_field(client, changes, status, field):
    response = client.post("/v1/completions", json=body_with(changes))
    assert response.status_code == status, response.text
    assert blamed_field(response) == field


@pytest.mark.parametrize("changes, loc", [
    ({"stream_options": {"bogus_key": 1}}, ["stream_options", "bogus_key"]),
    ({"response_format": {"type": "regex", "schema": "a+", "bogus": 1}}, ["response_format", "bogus"]),
    ({"bad_word_tokens": [{"tokens": [5], "bogus": 1}]}, ["bad_word_tokens", 0, "bogus"]),
])
def test_an_unknown_key_inside_a_friendli_object_is_a_422_naming_it(client, changes, loc):
    response = client.post("/v1/completions", json=body_with(changes))
    assert response.status_code == 422, response.text
    assert any(detail["loc"] == ["body", *loc] and detail["type"] == "extra_forbidden"
               for detail in response.json()["detail"]), response.text


def test_there_are_at_least_forty_cases_and_the_server_still_serves(client):
    assert len(CASES) >= 40
    choice = complete(client, **OK)["choices"][0]
    assert choice["finish_reason"] in ("stop", "length") and len(choice["tokens"]) <= 2


def test_malformed_json_and_non_objects_are_422(client):
    response = client.post("/v1/completions", content=b'{"prompt": "x",', headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_invalid"
    response = client.post("/v1/completions", json=["prompt"])
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body"]


def test_every_service_tier_is_served(client):
    # Without --priority-api-key anyone may ask for priority (tests/api/test_tenancy_http.py has the rest).
    for tier in ("auto", "default", "flex", "priority"):
        assert complete(client, **OK, service_tier=tier)["choices"]


def as_sampled(request):
    """An engine request without what differs between any two requests: its id and the seed
    the server drew (greedy sampling ignores it)."""
    return dataclasses.replace(request, request_id="", sampling=dataclasses.replace(request.sampling, seed=None))


@pytest.mark.parametrize("no_ops", [
    {"best_of": 1, "suffix": None},
    {"length_penalty": 1.0, "early_stopping": False, "beam_search_type": "DETERMINISTIC"},  # no beam search
], ids=["best_of-suffix", "beam-defaults"])
def test_legacy_openai_fields_at_their_no_op_values_are_served(client, engine_requests, no_ops):
    """Served exactly as without them: the same engine request (no beam search, the same
    sampling) and the same greedy tokens."""
    def said(choice: dict) -> tuple:
        return choice["text"], choice["tokens"], choice["finish_reason"]

    without = greedy(client, "hello")
    assert said(greedy(client, "hello", **no_ops)) == said(without)
    request_without, request_with = map(as_sampled, engine_requests)
    assert request_with == request_without and request_with.beam is None
    assert server_state(client).running_engine.num_in_flight == 0
