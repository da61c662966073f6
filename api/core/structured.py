"""Structured output: a dialect's format field becomes the engine Grammar the answer follows.

Every dialect names its format differently, but they come down to a handful of shapes,
read here once:

| shape | where | grammar |
| --- | --- | --- |
| `{"type": "text"}` | everywhere | none |
| `{"type": "json_object"}` | chat, completions, Responses | any JSON object |
| `{"type": "json_object", "schema": S}` | Fireworks, Friendli serverless (S may be a JSON string) | S |
| `{"type": "json_schema", "json_schema": {"schema": S, "strict": b}}` | OpenAI chat, Friendli | S |
| `{"type": "json_schema", "schema": S}` or `"json_schema": S` | Fireworks (S may be a JSON string) | S |
| `{"type": "json_schema", "schema": S, "strict": b}` | Responses `text.format` | S |
| `{"type": "json_schema", "schema": S}` | Anthropic `output_config.format` | S |
| `{"type": "regex", "schema": R}` | Friendli | R |
| `{"type": "grammar", "grammar": G}` | Fireworks (GBNF) | G |

A strict schema is enforced as given, and one llguidance cannot compile is refused; its
objects that do not say otherwise are closed (`additionalProperties: false`), since
OpenAI's strict mode promises exactly the properties the schema lists. A schema that is not
strict is compiled leniently (keywords llguidance does not support are ignored, the rest
enforced) and as JSON Schema reads it, so the answer is still valid JSON shaped by it. The
grammar is compiled before the request is admitted: a bad schema, regex or grammar is a
400 naming the field, with llguidance's message. A key the format's type does not read
(a `grammar` on a json_schema format, say) is a 400 naming it, never ignored.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from api.core.errors import ApiError, invalid
from api.core.state import ServerState
from api.core.tools import Tool
from engine.text.grammar import Grammar, GrammarError

ANY_JSON_OBJECT = Grammar("json_schema", '{"type": "object"}')
# The keys each format type reads besides `type`. Fireworks' format takes `schema`, `grammar`
# and `json_schema` whatever its type; one the type does not read is refused by name.
FORMAT_KEYS = {
    "text": (),
    "json_object": ("schema",),  # the answer's schema (Fireworks; Friendli serverless)
    "json_schema": ("json_schema", "schema", "strict", "name", "description"),
    "regex": ("schema",),
    "grammar": ("grammar",),
}


def format_grammar(value: Any, param: str) -> tuple[Grammar | None, str]:
    """The grammar a format field asks for (None for plain text), and the path of the field
    that holds its text (`param` names the format field itself)."""
    data = as_data(value)
    kind = None if data is None else data.get("type")
    if kind is not None:
        refuse_unread_keys(data, param)
    if kind in (None, "text"):
        return None, param
    if kind == "json_object":
        return object_grammar(data, param)
    if kind == "json_schema":
        schema, strict, where = schema_of(data, param)
        return schema_grammar(schema, strict, where), where
    if kind == "regex":
        return Grammar("regex", required_text(data, "schema", param)), f"{param}.schema"
    if kind == "grammar":
        return Grammar("gbnf", required_text(data, "grammar", param)), f"{param}.grammar"
    raise invalid(f"{param}.type", f"the format type {kind!r} is not one this server knows")


def refuse_unread_keys(data: dict[str, Any], param: str) -> None:
    """A 400 naming a key that the format's type would not read, or a schema given twice
    (a key given as null counts as not given)."""
    kind = data["type"]
    if kind in FORMAT_KEYS:
        refuse_unknown_keys(data, ("type", *FORMAT_KEYS[kind]), param, f"a {kind} format")
    if kind == "json_schema" and data.get("schema") is not None and data.get("json_schema") is not None:
        raise invalid(f"{param}.json_schema", "give the schema once: in `schema` or in `json_schema`")


def object_grammar(data: dict[str, Any], param: str) -> tuple[Grammar, str]:
    """A json_object format's grammar: any object, or its `schema` enforced as a strict
    json_schema format's is (an object or a JSON string)."""
    if data.get("schema") is None:
        return ANY_JSON_OBJECT, param
    where = f"{param}.schema"
    return schema_grammar(parsed(data["schema"], where), True, where), where


def schema_grammar(schema: Any, strict: bool, param: str) -> Grammar:
    """The grammar of a JSON schema: strict, its objects closed; else leniently compiled."""
    if not isinstance(schema, dict):
        raise invalid(param, "the JSON schema must be an object")
    return Grammar("json_schema", json.dumps(enforced_schema(schema, strict)))


def enforced_schema(schema: dict, strict: bool) -> dict:
    """`schema` as it is enforced (see the module docstring)."""
    if strict:
        return closed(schema)
    return {**schema, "x-guidance": {**schema.get("x-guidance", {}), "lenient": True}}


OPEN_KEYWORDS = ("additionalProperties", "unevaluatedProperties", "patternProperties")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


def closed(schema: Any) -> Any:
    """A copy of `schema` whose objects allow no property they do not list, unless they say
    otherwise. Members of `allOf` are left open: each lists only part of the properties."""
    if not isinstance(schema, dict):
        return schema
    result = dict(schema)
    if "properties" in result and not any(key in result for key in OPEN_KEYWORDS):
        result["additionalProperties"] = False
    for key in SUBSCHEMA_MAPS:
        if isinstance(result.get(key), dict):
            result[key] = {name: closed(sub) for name, sub in result[key].items()}
    for key in SUBSCHEMA_LISTS:
        if isinstance(result.get(key), list):
            result[key] = [closed(sub) for sub in result[key]]
    if isinstance(result.get("items"), dict):
        result["items"] = closed(result["items"])
    return result


def schema_of(data: dict[str, Any], param: str) -> tuple[Any, bool, str]:
    """(schema, strict, its field's path) of a json_schema format in any dialect's shape."""
    nested = data.get("json_schema")
    if isinstance(nested, dict) and ("schema" in nested or "name" in nested):  # OpenAI chat, Friendli
        refuse_unknown_keys(nested, WRAPPER_KEYS, f"{param}.json_schema", "a json_schema format's `json_schema`")
        # OpenAI's (which names the format) is strict only when asked; Friendli's has no such flag.
        strict = bool(nested.get("strict", "name" not in nested))
        return parsed(nested.get("schema", {}), f"{param}.json_schema.schema"), strict, f"{param}.json_schema.schema"
    if data.get("schema") is not None:  # Fireworks, Responses, Anthropic
        return parsed(data["schema"], f"{param}.schema"), bool(data.get("strict", True)), f"{param}.schema"
    if nested is not None:  # Fireworks: the schema itself, as an object or a JSON string
        return parsed(nested, f"{param}.json_schema"), True, f"{param}.json_schema"
    raise invalid(param, "a json_schema format needs a schema")


# The keys of OpenAI's and Friendli's `json_schema` object, which holds the schema. Fireworks'
# `json_schema` is the schema itself, so the union of the dialects lets any key through.
WRAPPER_KEYS = ("name", "schema", "strict", "description")


def refuse_unknown_keys(data: dict[str, Any], known: tuple[str, ...], param: str, owner: str) -> None:
    """A 400 naming the first key of `data` outside `known` (a null counts as not given)."""
    for key in sorted(data):
        if key not in known and data[key] is not None:
            raise invalid(f"{param}.{key}", f"{owner} has no `{key}`")


def parsed(schema: Any, param: str) -> Any:
    """A schema given as a JSON string, decoded (a 400 naming `param` if it is not JSON)."""
    if not isinstance(schema, str):
        return schema
    try:
        return json.loads(schema)
    except json.JSONDecodeError as error:
        raise invalid(param, f"the schema is not valid JSON: {error}") from None


def required_text(data: dict[str, Any], key: str, param: str) -> str:
    text = data.get(key)
    if not isinstance(text, str) or not text:
        raise invalid(f"{param}.{key}", f"a {data['type']} format needs its `{key}` text")
    return text


def as_data(value: Any) -> dict[str, Any] | None:
    """A format field (a generated model, a RootModel or plain JSON) as plain JSON data."""
    value = getattr(value, "root", value)
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


async def check_tool_grammars(server: ServerState, tools: list[Tool], schema_path: str,
                              grammar_path: str = "") -> None:
    """Compile each tool's own schema or input grammar, so that a bad one is refused by its
    path (`schema_path` and `grammar_path` are formats of the tool's `index`)."""
    for index, tool in enumerate(tools):
        if tool.custom:
            await check_grammar(server, tool.input_grammar, grammar_path.format(index=index))
        else:
            where = schema_path.format(index=index)
            await check_grammar(server, schema_grammar(tool.arguments_schema, tool.strict, where), where)


async def check_grammar(server: ServerState, grammar: Grammar | None, param: str) -> None:
    """Compile `grammar` (kept for the engine, off the event loop); a 400 naming `param`
    with llguidance's message when it cannot be."""
    if grammar is None:
        return
    try:
        await asyncio.to_thread(server.running_engine.engine.grammars.check, grammar)
    except GrammarError as error:
        raise ApiError(400, f"`{param}` cannot be used to constrain the output: {error}", param=param,
                       code="invalid_grammar") from None
