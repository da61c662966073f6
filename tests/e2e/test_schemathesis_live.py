"""Schemathesis against the live server: requests generated from the contract it serves at
/openapi.json, valid and invalid, must never get a 5xx, and every answer must have a
documented status, a documented content type and a body of the documented schema.

Bounded for CI: a few examples per operation, derandomized, and no `/inference/v1` alias
(the same handlers as `/v1`; tests/api/test_openapi.py checks the alias is listed). Every
generated body asks for at most CAP tokens and choices: a body may ask for up to the whole
context, which on CPU takes minutes. A body of a chat or responses request that sets no
length gets one (its default is the whole context); a completions body keeps its default
of 16. Only values above CAP change, so an invalid value (0, -1, a string) stays invalid.
A generated `model` name is replaced by the served model's, or nearly every request would
stop at its 404.

Schemathesis reads an event stream's `schema` as each event's schema (OpenAPI 3.2's
reading); the contract's describes the JSON in each `data:` line, as the vendor specs do,
so a stream's events are checked here (`stream_conforms`) instead of by Schemathesis.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from contract_helpers import schema_errors

CAP = 4  # tokens, choices, beams
CAPPED_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens", "max_total_tokens",
                 "min_total_tokens", "n", "num_beams", "best_of")
# The length field of the dialects whose default length is the rest of the context.
LENGTH_FIELD = {"/v1/chat/completions": "max_completion_tokens", "/v1/responses": "max_output_tokens"}
# Per operation and mode (valid requests, invalid ones); derandomized, so CI sees the same
# requests every run; not shrunk, so a failure costs no extra requests.
SETTINGS = hypothesis.settings(max_examples=10, derandomize=True, database=None, deadline=None,
                               phases=[hypothesis.Phase.generate], suppress_health_check=list(hypothesis.HealthCheck))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance]


@pytest.fixture(scope="module")
def contract_document(live_server) -> dict[str, Any]:
    return httpx.get(f"{live_server}/openapi.json", timeout=60).raise_for_status().json()


def test_the_live_server_keeps_its_contract(live_server, live_state, contract_document):
    # Schemathesis' own pytest integration (`from_fixture`) fails under pytest 9.2 (it sets
    # `node._nodeid`, gone there), so each operation runs through its Hypothesis strategies here.
    schema = schemathesis.openapi.from_dict(contract_document)
    schema.config.update(base_url=live_server, request_timeout=120)
    failures = []
    for result in schema.exclude(path_regex="^/inference/").get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                exercise(operation, mode, contract_document, live_state.model.id)
            except hypothesis.errors.Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing in it can be invalid
            except (AssertionError, FailureGroup) as failure:
                failures.append(f"{operation.label} ({mode.value}): {failure}")
    assert not failures, "\n\n".join(failures)


def exercise(operation, mode: GenerationMode, document: dict[str, Any], model: str) -> None:
    @SETTINGS
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def call_and_check(case) -> None:
        if isinstance(case.body, dict):
            keep_small(case.body, case.path)
            if isinstance(case.body.get("model"), str):
                case.body["model"] = model  # a generated name is another model: 404 before anything runs
        response = case.call()
        if is_stream(response):
            case.validate_response(response, checks=CHECKS)
            stream_conforms(document, case, response)
        else:
            case.validate_response(response, checks=[*CHECKS, response_schema_conformance])

    call_and_check()


def keep_small(body: dict[str, Any], path: str) -> None:
    """At most CAP tokens and choices (the module docstring says why)."""
    for field in CAPPED_FIELDS:
        value = body.get(field)
        # JSON Schema's integers include 5e8, which arrives as a float.
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > CAP:
            body[field] = CAP
    if path in LENGTH_FIELD and not any(field in body for field in CAPPED_FIELDS[:3]):
        body[LENGTH_FIELD[path]] = CAP


def is_stream(response) -> bool:
    return response.headers.get("content-type", [""])[0].startswith("text/event-stream")


def stream_conforms(document: dict[str, Any], case, response) -> None:
    """Each `data:` line's JSON is of the documented event schema (`[DONE]` ends a stream)."""
    documented = document["paths"][case.path][case.method.lower()]["responses"][str(response.status_code)]
    schema = documented["content"]["text/event-stream"]["schema"]
    for line in response.content.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            event = json.loads(line.removeprefix("data: "))
            errors = schema_errors(document, schema, event)
            assert not errors, f"{case.method} {case.path}: a stream event breaks its schema: {errors}\n{event}"
