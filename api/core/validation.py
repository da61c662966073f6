"""Request bodies: raw JSON to generated models, every violation a RequestValidationError.

Handlers read the raw body (`read_json_body`) and validate it here (`parse_body`) rather than
through Litestar's typed `data:` parameters, so that each dialect answers schema violations
in its own shape (api/core/errors.py). Decoding runs off the event loop: a body of many
megabytes takes a while to decode, and every stream and /health would wait meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Annotated, Any, TypeVar, Union

import pydantic
from litestar import Request

from api.core.errors import ApiError, RequestValidationError

Model = TypeVar("Model", bound=pydantic.BaseModel)
# No request schema nests anywhere near this deep; deeper JSON is refused before it reaches
# code that walks it recursively (pydantic, the field registry).
MAX_JSON_DEPTH = 64


def parse_body(model_cls: type[Model], raw: object, *, extra: str | None = None,
               location: str = "body") -> Model:
    """`raw` (decoded JSON) as `model_cls`; RequestValidationError on any schema violation.

    `extra="forbid"` refuses unknown fields in nested models too (the generated models
    forbid them only at the top level where the spec says so), except inside free-form
    objects, the models whose own config allows any keys (a function's JSON Schema
    `parameters`, a `json_schema.schema`, `metadata`): pydantic's override would forbid
    them there too, so such a body is validated again under each model's own config and
    only keys unknown to a closed model are refused."""
    try:
        return model_cls.model_validate(raw, extra=extra)
    except pydantic.ValidationError as error:
        if extra == "forbid" and all(detail["type"] == "extra_forbidden" for detail in error.errors()):
            return parse_open_body(model_cls, raw, location)
        raise RequestValidationError.of(error, raw, location) from None


def parse_open_body(model_cls: type[Model], raw: object, location: str) -> Model:
    """`raw` under its models' own `extra` settings, refused if it has keys that no closed
    model defines."""
    try:
        body = model_cls.model_validate(raw)
    except pydantic.ValidationError as error:  # its errors leave the free-form objects be
        raise RequestValidationError.of(error, raw, location) from None
    unknown = list(unknown_keys(body, raw))
    if unknown:
        raise RequestValidationError([{"loc": [location, *path], "msg": "Extra inputs are not permitted",
                                       "type": "extra_forbidden"} for path in unknown])
    return body


def unknown_keys(value: Any, raw: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The paths of `raw`'s keys that the validated `value` has no field for, outside the
    models that allow extra keys."""
    if isinstance(value, pydantic.RootModel):
        yield from unknown_keys(value.root, raw, path)
    elif isinstance(value, pydantic.BaseModel) and isinstance(raw, dict):
        fields = {info.alias or name: name for name, info in type(value).model_fields.items()}
        fields |= {name: name for name in type(value).model_fields}
        if value.model_config.get("extra") != "allow":
            yield from ((*path, key) for key in raw if key not in fields)
        for key, name in fields.items():
            if key in raw:
                yield from unknown_keys(value.__dict__[name], raw[key], (*path, key))  # no deprecation warnings
    elif isinstance(value, (list, tuple)) and isinstance(raw, list):
        for index, (item, raw_item) in enumerate(zip(value, raw)):
            yield from unknown_keys(item, raw_item, (*path, index))
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, item in value.items():
            if key in raw:
                yield from unknown_keys(item, raw[key], (*path, key))


def parse_query(model_cls: type[Model], request: Request) -> Model:
    """The query string as `model_cls`, unknown parameters refused (located in "query").
    Deep-object parameters (`metadata[key]=value`) become nested objects."""
    raw: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        outer, bracket, inner = name.partition("[")
        if bracket and inner.endswith("]"):
            nested = raw.get(outer)
            raw[outer] = {**(nested if isinstance(nested, dict) else {}), inner[:-1]: value}
        else:
            raw[name] = value
    return parse_body(model_cls, raw, extra="forbid", location="query")


async def read_json_body(request: Request) -> Any:
    """The request's body decoded as JSON (Litestar has refused a body over the size limit
    with 413 while reading it); malformed or too deeply nested JSON is a schema error."""
    raw = await request.body()
    return await asyncio.to_thread(decode_json, raw)


def decode_json(raw: bytes) -> Any:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        position = error.pos if isinstance(error, json.JSONDecodeError) else error.start
        raise RequestValidationError.at(["body", position], f"JSON decode error: {error}", "json_invalid") from None
    except RecursionError:  # the decoder's own limit, far past MAX_JSON_DEPTH
        raise too_deep() from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise too_deep()
    return value


def too_deep() -> ApiError:
    """A 400 on every route (also /v1/completions, whose schema errors are 422): the body is
    refused as a whole, before any schema reads it."""
    return ApiError(400, f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.", code="json_too_deep")


def json_depth(value: Any) -> int:
    """How many arrays and objects deep `value` nests (0 for a scalar), without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def require_object(raw: object) -> dict[str, Any]:
    """The body as a JSON object (what every request schema is)."""
    if not isinstance(raw, dict):
        raise RequestValidationError.at(["body"], "Input should be a valid dictionary or object",
                                        "model_attributes_type")
    return raw


def merged_model(name: str, models: tuple[type[pydantic.BaseModel], ...]) -> type[pydantic.BaseModel]:
    """One body model accepting the union of `models`' fields (unknown fields refused).

    A field several models define accepts any of their types (smart union: an exact type
    match wins, so `true` stays a bool where one dialect says int | bool). Every field
    defaults to None, so `model_fields_set` tells what the client gave; required fields
    are the caller's to enforce, since the dialects disagree on them."""
    types: dict[str, list[Any]] = {}
    for model in models:
        for field_name, info in model.model_fields.items():
            annotated = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
            variants = types.setdefault(field_name, [])
            if annotated not in variants:
                variants.append(annotated)
    fields = {field_name: (Union[tuple(variants)] | None, None) for field_name, variants in types.items()}
    return pydantic.create_model(name, __config__=pydantic.ConfigDict(extra="forbid"), **fields)
