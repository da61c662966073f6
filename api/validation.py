"""Request bodies: raw JSON to generated models, schema violations as 422s.

Litestar answers its own validation of typed `data:` parameters with 400, but the specs
answer schema violations with 422 in FastAPI's HTTPValidationError shape
(`{"detail": [{"loc": ["body", field, ...], "msg", "type"}]}`). So handlers read the raw
body (`read_json_body`) and validate it here (`parse_body`)."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar, Union

import pydantic
from litestar import Request

from generated.fireworks_completions import HTTPValidationError, ValidationError

Model = TypeVar("Model", bound=pydantic.BaseModel)


class RequestValidationError(Exception):
    """A body that breaks the schema; rendered as 422 HTTPValidationError."""

    def __init__(self, errors: list[ValidationError]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e.loc))}: {e.msg}" for e in errors))
        self.body = HTTPValidationError(detail=errors)

    @classmethod
    def at(cls, loc: list[str | int], msg: str, error_type: str) -> RequestValidationError:
        """One error at `loc` (which starts with "body")."""
        return cls([ValidationError(loc=loc, msg=msg, type=error_type)])


def parse_body(model_cls: type[Model], raw: object, *, extra: str | None = None,
               location: str = "body") -> Model:
    """`raw` (decoded JSON) as `model_cls`; RequestValidationError on any schema violation.

    `extra="forbid"` refuses unknown fields in nested models too (the generated models
    forbid them only at the top level where the spec says so)."""
    try:
        return model_cls.model_validate(raw, extra=extra)
    except pydantic.ValidationError as error:
        raise schema_error(error, location) from None


def schema_error(error: pydantic.ValidationError, location: str = "body") -> RequestValidationError:
    """pydantic's errors as HTTPValidationError entries located in the body (or query)."""
    return RequestValidationError([
        ValidationError(loc=[location, *detail["loc"]], msg=detail["msg"], type=detail["type"])
        for detail in error.errors(include_url=False)
    ])


def parse_query(model_cls: type[Model], request: Request) -> Model:
    """The query string as `model_cls`, unknown parameters refused (422 located in
    "query"). Deep-object parameters (`metadata[key]=value`) become nested objects."""
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
    """The request's body decoded as JSON; malformed JSON is a 422 like FastAPI's."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        position = error.pos if isinstance(error, json.JSONDecodeError) else error.start
        raise RequestValidationError.at(["body", position], f"JSON decode error: {error}",
                                        "json_invalid") from None


def require_object(raw: object) -> dict[str, Any]:
    """The body as a JSON object (what every request schema is)."""
    if not isinstance(raw, dict):
        raise RequestValidationError.at(["body"], "Input should be a valid dictionary or object",
                                        "model_attributes_type")
    return raw


def merged_model(name: str, models: tuple[type[pydantic.BaseModel], ...]) -> type[pydantic.BaseModel]:
    """One body model accepting the union of `models`' fields (unknown fields: 422).

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
