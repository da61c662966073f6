"""Response formats on /v1/chat/completions, on the tiny random model: whatever the model
prefers, the answer follows the format, and a format that cannot be compiled is a 400."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from chat_helpers import MODEL_ID, URL

BOUNDED = {"type": "object", "properties": {
    "size": {"enum": ["s", "m", "l"]}, "count": {"type": "integer", "minimum": 0, "maximum": 50},
    "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}},
    "required": ["size", "count", "flags"], "additionalProperties": False}


def answer(client, response_format, **fields) -> list[dict]:
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "JSON please"}], "temperature": 1.0,
            "seed": 3, "max_completion_tokens": 100, "response_format": response_format, **fields}
    response = client.post(URL, json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"]


def test_json_schema_answers_validate(client):
    choices = answer(client, {"type": "json_schema", "json_schema": {"name": "x", "schema": BOUNDED, "strict": True}},
                     n=4)
    for choice in choices:
        jsonschema.validate(json.loads(choice["message"]["content"]), BOUNDED)
        assert choice["finish_reason"] == "stop"


def test_json_object_answers_are_objects(client):
    # A regex-bounded object: the random model ends it quickly; any JSON object is allowed.
    for choice in answer(client, {"type": "json_object"}, n=3, max_completion_tokens=60):
        text = choice["message"]["content"]
        assert text.startswith("{")
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict)


def test_a_json_object_formats_schema_is_enforced(client):
    # Fireworks' format takes a schema on json_object; it allows one answer only.
    for choice in answer(client, {"type": "json_object", "schema": {"const": "42"}}, n=3):
        assert json.loads(choice["message"]["content"]) == "42"
        assert choice["finish_reason"] == "stop"


def test_a_gbnf_grammar_format_is_followed(client):
    grammar = 'root ::= "id-" [0-9] [0-9] [0-9]'
    for choice in answer(client, {"type": "grammar", "grammar": grammar}, n=3):
        assert re.fullmatch(r"id-[0-9]{3}", choice["message"]["content"])


def test_a_cut_answer_finishes_with_length(client):
    [choice] = answer(client, {"type": "json_schema", "json_schema": {"name": "x", "schema": BOUNDED}},
                      max_completion_tokens=3)
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"].startswith("{")


@pytest.mark.parametrize("response_format, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}, "strict": True}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(a"},
                                              "strict": True}}, "response_format.json_schema.schema"),
    ({"type": "grammar", "grammar": "root ::= missing"}, "response_format.grammar"),
    ({"type": "json_schema", "json_schema": "{not json"}, "response_format.json_schema"),
    ({"type": "json_object", "schema": {"type": "hiccup"}}, "response_format.schema"),
    ({"type": "json_object", "schema": {"type": 123}}, "response_format.schema"),
    ({"type": "text", "grammar": "root ::= missing"}, "response_format.grammar"),
    # Read as OpenAI's, not as Fireworks' schema-in-`json_schema`, since it names a `schema`.
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": BOUNDED, "bogus": 1}},
     "response_format.json_schema.bogus"),
])
def test_formats_that_cannot_compile_are_refused_by_field(client, response_format, param):
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "response_format": response_format}
    response = client.post(URL, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
