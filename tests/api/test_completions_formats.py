"""response_format on /v1/completions, in Fireworks' and Friendli's shapes, on the tiny random
model: whatever the model prefers, every choice follows the format, whole or streamed."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from completions_helpers import MODEL, complete, stream_events

BOUNDED = {"type": "object", "properties": {
    "level": {"enum": ["low", "high"]}, "score": {"type": "integer", "minimum": 1, "maximum": 9},
    "ok": {"type": "boolean"}}, "required": ["level", "score", "ok"], "additionalProperties": False}


def texts(client, response_format, n: int = 3, **body) -> list[tuple[str, str]]:
    body = {"model": MODEL, "prompt": "Answer:", "max_tokens": 60, "temperature": 1.0, "seed": 5, "n": n,
            "response_format": response_format, **body}
    answer = complete(client, **body)
    return [(choice["text"], choice["finish_reason"]) for choice in answer["choices"]]


@pytest.mark.parametrize("response_format", [
    {"type": "json_schema", "schema": BOUNDED},  # Fireworks
    {"type": "json_schema", "json_schema": json.dumps(BOUNDED)},  # Fireworks, the schema as a string
    {"type": "json_schema", "json_schema": {"schema": BOUNDED}},  # Friendli
])
def test_json_schema_answers_validate(client, response_format):
    for text, finish in texts(client, response_format):
        jsonschema.validate(json.loads(text), BOUNDED)
        assert finish == "stop"


def test_streamed_answers_follow_the_schema_too(client):
    events = stream_events(client, model=MODEL, prompt="Answer:", max_tokens=60, temperature=1.0, seed=9,
                           response_format={"type": "json_schema", "schema": BOUNDED})
    text = "".join(choice["text"] for event in events for choice in event.get("choices", []))
    jsonschema.validate(json.loads(text), BOUNDED)


def test_json_object_answers_start_an_object(client):
    for text, finish in texts(client, {"type": "json_object"}, max_tokens=40):
        assert text.startswith("{")
        if finish == "stop":
            assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize("schema", [
    {"const": "42"},  # Fireworks: the schema as an object
    json.dumps({"const": "42"}),  # Friendli serverless: a serialized JSON schema
])
def test_a_json_object_formats_schema_is_enforced(client, schema):
    # The schema allows one answer only, whatever the random model prefers.
    for text, finish in texts(client, {"type": "json_object", "schema": schema}):
        assert json.loads(text) == "42"
        assert finish == "stop"


def test_fireworks_gbnf_grammar_is_followed(client):
    grammar = 'root ::= "A" [0-9] ("," [0-9])?'
    for text, _ in texts(client, {"type": "grammar", "grammar": grammar}):
        assert re.fullmatch(r"A[0-9](,[0-9])?", text), text


def test_friendli_regex_is_followed(client):
    for text, finish in texts(client, {"type": "regex", "schema": "(cat|dog)s? [0-9]{2}"}):
        assert re.fullmatch(r"(cat|dog)s? [0-9]{2}", text), text
        assert finish == "stop"


def test_text_format_leaves_the_answer_free(client):
    [(text, _)] = texts(client, {"type": "text"}, n=1, max_tokens=8, ignore_eos=True)
    assert text


@pytest.mark.parametrize("response_format, param", [
    ({"type": "json_schema", "schema": {"type": "objekt"}}, "response_format.schema"),
    ({"type": "json_schema", "json_schema": "{oops"}, "response_format.json_schema"),
    ({"type": "regex", "schema": "(unclosed"}, "response_format.schema"),
    ({"type": "grammar", "grammar": "root ::= nowhere"}, "response_format.grammar"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "string", "format": "no-such-format"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_object", "schema": {"type": "hiccup"}}, "response_format.schema"),
    ({"type": "json_object", "schema": {"type": 123}}, "response_format.schema"),
    ({"type": "json_object", "schema": "{oops"}, "response_format.schema"),
])
def test_formats_that_cannot_compile_are_refused_by_field(client, response_format, param):
    response = client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "response_format": response_format})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("response_format, param", [
    ({"type": "text", "schema": {"const": "42"}}, "response_format.schema"),
    ({"type": "json_object", "grammar": 'root ::= "{}"'}, "response_format.grammar"),
    ({"type": "json_object", "json_schema": {"const": "42"}}, "response_format.json_schema"),
    ({"type": "json_schema", "schema": BOUNDED, "grammar": 'root ::= "{}"'}, "response_format.grammar"),
    ({"type": "json_schema", "schema": BOUNDED, "json_schema": BOUNDED}, "response_format.json_schema"),
    ({"type": "grammar", "grammar": 'root ::= "{}"', "schema": BOUNDED}, "response_format.schema"),
    ({"type": "json_schema", "json_schema": {"schema": BOUNDED, "bogus": 1}}, "response_format.json_schema.bogus"),
])
def test_a_format_key_its_type_does_not_read_is_refused(client, response_format, param):
    # Fireworks' format takes `schema`, `grammar` and `json_schema` whatever its type.
    response = client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "response_format": response_format})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
