"""Fail closed, on the live SmolLM2 server: every answer to a JSON schema validates, and every
grammar that cannot be compiled is a 400 naming the field.

Each schema is asked for with five seeds at temperature 1 (one request, n=5: each choice has
its own seed) through the `openai` SDK; each answer must validate with `jsonschema`, formats
included. Strings are bounded so an answer ends well within its token limit (times too:
llguidance lets a time's fraction of a second run on, and sampled at temperature 1 a small
model can write digits until its limit; so can an unbounded number).
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
NAME = {"type": "string", "minLength": 1, "maxLength": 24}
SCHEMAS = {
    "flat": {"type": "object", "properties": {"name": NAME, "age": {"type": "integer"}}, "required": ["name", "age"]},
    "enum": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    "const": {"type": "object", "properties": {"kind": {"const": "point"},
                                               "x": {"type": "integer", "minimum": -999, "maximum": 999}},
              "required": ["kind", "x"]},
    "bounded_numbers": {"type": "object", "properties": {
        "pct": {"type": "number", "minimum": 0, "maximum": 100},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100}}, "required": ["pct", "year"]},
    "exclusive_bounds": {"type": "object", "properties": {"t": {"type": "integer", "exclusiveMinimum": 0,
                                                                "exclusiveMaximum": 10}}, "required": ["t"]},
    "date": {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}, "required": ["day"]},
    "date_time": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time", "maxLength": 35}},
                  "required": ["at"]},
    "email": {"type": "object", "properties": {"to": {"type": "string", "format": "email", "maxLength": 40}},
              "required": ["to"]},
    "uuid": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"]},
    "ipv4": {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}}, "required": ["ip"]},
    "pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
                "required": ["code"]},
    "string_array": {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "minItems": 1,
                                                               "maxItems": 4}}, "required": ["tags"]},
    "nested_arrays": {"type": "object", "properties": {"grid": {
        "type": "array", "minItems": 1, "maxItems": 3,
        "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1,
                  "maxItems": 3}}}, "required": ["grid"]},
    "nested_objects": {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "name": NAME, "address": {"type": "object", "properties": {"city": NAME, "zip": {
            "type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]}},
        "required": ["name", "address"]}}, "required": ["user"]},
    "any_of": {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "boolean"},
                                                                   {"enum": ["none"]}]}}, "required": ["value"]},
    "one_of_objects": {"type": "object", "properties": {"shape": {"anyOf": [
        {"type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"], "additionalProperties": False},
        {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}}, "required": ["w", "h"],
         "additionalProperties": False}]}}, "required": ["shape"]},
    "nullable": {"type": "object", "properties": {"note": {"type": ["string", "null"], "maxLength": 20}},
                 "required": ["note"]},
    "no_extra_properties": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
                            "required": ["a", "b"], "additionalProperties": False},
    "array_root": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 2,
                   "maxItems": 5},
    "refs": {"$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[a-z]{4}$"},
                                                                 "qty": {"type": "integer", "minimum": 1,
                                                                         "maximum": 99}},
                                "required": ["sku", "qty"], "additionalProperties": False}},
             "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"},
                                                        "minItems": 1, "maxItems": 3}}, "required": ["items"]},
    "time_and_uuid_list": {"type": "object", "properties": {
        "when": {"type": "string", "format": "time", "maxLength": 24},
        "ids": {"type": "array", "items": {"type": "string", "format": "uuid"}, "maxItems": 2}},
        "required": ["when", "ids"]},
    "boolean_root": {"type": "boolean"},
}
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER  # RFC 3339 times and dates (rfc3339-validator)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_validates_for_five_seeds(sdk, name):
    schema = SCHEMAS[name]
    reply = sdk.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": f"Give me an example {name} record as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        n=5, seed=2026, temperature=1.0, max_completion_tokens=300)
    assert len(reply.choices) == 5
    for choice in reply.choices:
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), schema, format_checker=FORMATS)


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"},
                                                                 "strict": True}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "string", "pattern": "([a-z]"}}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "grammar", "grammar": "root ::= undefined-rule"}}, "response_format.grammar"),
    ({"tools": [{"type": "custom", "custom": {"name": "q", "format": {"type": "grammar", "grammar": {
        "syntax": "regex", "definition": "(a|b"}}}}]}, "tools.[0].custom.format.grammar.definition"),
    ({"tools": [{"type": "custom", "custom": {"name": "q", "format": {"type": "grammar", "grammar": {
        "syntax": "lark", "definition": "start: nothing_defined"}}}}]}, "tools.[0].custom.format.grammar.definition"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}}}}]},
     "tools.[0].function.parameters"),
]


@pytest.mark.parametrize("fields, param", BAD, ids=[param for _, param in BAD])
def test_grammars_that_cannot_compile_are_400_naming_the_field(sdk, fields, param):
    with pytest.raises(openai.BadRequestError) as error:
        sdk.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "hi"}],
                                    max_completion_tokens=4, **fields)
    assert error.value.status_code == 400
    assert error.value.body["param"] == param
    assert "cannot be used to constrain the output" in error.value.body["message"]
