"""The field registry: every field of every served request model is handled or refused.

Each dialect module registers its generated request models here, naming for each handled
field the test that proves it and for each refused field the reason:

    register(CompletionRequest, handled={"n": "tests/api/test_completions.py::test_n"},
             refused={"images": "images are not supported: this server serves text models"})

Routes call `refuse_unsupported(model_cls, fields_set, values)`, so every refusal 400 comes
from here and names its field. Nested request models (stream_options, a seed's model, ...)
are registered the same way; `unregistered_fields` walks a model and the models its handled
fields hold, and tests/api/test_field_registry.py fails on any field in neither list. After a
spec change and `make codegen` that test names each new field until someone decides.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from api.errors import ApiError

# The modules that register dialects; `load_dialects` imports them so the registry is complete.
DIALECT_MODULES = ("api.completions_fields", "api.chat_fields", "api.tokens_fields", "api.messages_fields",
                   "api.stored_chat_fields", "api.responses_fields", "api.unserved")


def given(value: Any) -> bool:
    """The default refusal condition: the client sent a value (null counts as absent)."""
    return value is not None


@dataclass(frozen=True)
class Refusal:
    """A refused field: why, and for which values (by default any non-null value)."""

    reason: str
    applies: Callable[[Any], bool] = given


@dataclass(frozen=True)
class Handled:
    test: str  # "tests/api/test_x.py::test_name": the test that proves the handling


def model_key(model_cls: type) -> str:
    """`fireworks_completions.CompletionRequest`: stable across re-imports of a regenerated module."""
    return f"{model_cls.__module__.rsplit('.', 1)[-1]}.{model_cls.__qualname__}"


_ENTRIES: dict[str, dict[str, Handled | Refusal]] = {}
_NOT_SERVED: dict[str, str] = {}


def register(model_cls: type[pydantic.BaseModel], *, handled: Mapping[str, str],
             refused: Mapping[str, str | Refusal] | None = None) -> None:
    """Record how a route treats each field of `model_cls` (Python field names)."""
    entries = _ENTRIES.setdefault(model_key(model_cls), {})
    for name, test in handled.items():
        entries[name] = Handled(test)
    for name, refusal in (refused or {}).items():
        entries[name] = refusal if isinstance(refusal, Refusal) else Refusal(refusal)


def register_like(model_cls: type[pydantic.BaseModel], like: type[pydantic.BaseModel]) -> None:
    """Treat the fields of `model_cls` as `like` does (a subset schema served by the same route)."""
    decisions = entries(like)
    _ENTRIES.setdefault(model_key(model_cls), {}).update(
        {name: decisions[name] for name in model_cls.model_fields if name in decisions})


def not_served(model_cls: type[pydantic.BaseModel], reason: str) -> None:
    """A generated request model whose route this server does not have (yet), and why."""
    _NOT_SERVED[model_key(model_cls)] = reason


def entries(model_cls: type) -> Mapping[str, Handled | Refusal]:
    return _ENTRIES.get(model_key(model_cls), {})


def not_served_reason(model_cls: type) -> str | None:
    return _NOT_SERVED.get(model_key(model_cls))


def all_handled() -> dict[str, dict[str, str]]:
    """Model key -> handled field -> test, for the test that checks the named tests exist."""
    return {key: {name: e.test for name, e in fields.items() if isinstance(e, Handled)}
            for key, fields in _ENTRIES.items()}


def load_dialects() -> None:
    """Import every dialect module that exists, so their registrations are in."""
    for name in DIALECT_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def unregistered_fields(model_cls: type[pydantic.BaseModel]) -> list[str]:
    """`Model.field` for every field of `model_cls`, and of the request models its handled
    fields hold, that is neither handled nor refused."""
    missing: list[str] = []
    for model in request_models_within(model_cls):
        known = entries(model)
        missing += [f"{model.__qualname__}.{name}" for name in model.model_fields if name not in known]
    return missing


def request_models_within(model_cls: type[pydantic.BaseModel]) -> list[type[pydantic.BaseModel]]:
    """`model_cls` and every model reachable through its handled (or unregistered) fields;
    a RootModel stands for the models of its root. Refused fields are not entered."""
    found: list[type[pydantic.BaseModel]] = []
    pending = [model_cls]
    while pending:
        model = pending.pop()
        if model in found:
            continue
        if issubclass(model, pydantic.RootModel):
            pending += _models_in(model.model_fields["root"].annotation)
            continue
        found.append(model)
        known = entries(model)
        for name, info in model.model_fields.items():
            if not isinstance(known.get(name), Refusal):
                pending += _models_in(info.annotation)
    return found


def _models_in(annotation: Any) -> list[type[pydantic.BaseModel]]:
    """The pydantic models inside a type (through unions, lists, dicts, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is not None:  # a union, list[...], dict[...], Annotated[...]
        return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
    return []


def refuse_unsupported(models: Iterable[type[pydantic.BaseModel]], fields_set: Iterable[str],
                       values: Mapping[str, Any], location: str = "") -> None:
    """Raise a 400 naming the first given field that `models` refuse, or that no model
    registers (a field added to a spec but not yet decided on is never silently ignored).

    `fields_set`: the fields the client gave; `values`: their values; `location`: the path
    of the object holding them, prefixed to the field's name in the error."""
    models = list(models)
    for name in sorted(fields_set):
        decisions = [entries(model).get(name) for model in models if name in model.model_fields]
        decisions = [d for d in decisions if d is not None] or [None]
        refusal = next((d for d in decisions if isinstance(d, Refusal)), None)
        if refusal is not None and refusal.applies(values.get(name)):
            raise ApiError(400, f"`{location}{name}` is not supported: {refusal.reason}",
                           param=location + name)
        if all(d is None for d in decisions):
            raise ApiError(400, f"`{location}{name}` is not handled by this server yet",
                           param=location + name)


def refuse_unsupported_within(request: pydantic.BaseModel, location: str = "",
                              models: Iterable[type[pydantic.BaseModel]] | None = None) -> None:
    """`refuse_unsupported` for `request` and for every model instance its given fields
    hold (a message, a content part, stream_options), each error naming the field's path
    in OpenAI's spelling: `messages.[0].content.[1].image_url`. `models`: the registered
    models whose decisions apply to `request` itself (by default its own class)."""
    models = list(models or [type(request)])
    values = request.__dict__  # the field values, read without deprecated fields' warnings
    refuse_unsupported(models, request.model_fields_set, values, location)
    # A refused field's accepted values (`response_format: {"type": "text"}`) hold nothing
    # more to check: as in `request_models_within`, refused fields are not entered.
    refused = {name for model in models for name, e in entries(model).items() if isinstance(e, Refusal)}
    for name in sorted(request.model_fields_set - refused):
        for child, path in _instances_in(values[name], location + name):
            refuse_unsupported_within(child, path + ".")


def _instances_in(value: Any, path: str) -> Iterable[tuple[pydantic.BaseModel, str]]:
    """The model instances inside a field's value, with their paths (RootModels unwrapped)."""
    if isinstance(value, pydantic.RootModel):
        yield from _instances_in(value.root, path)
    elif isinstance(value, pydantic.BaseModel):
        yield value, path
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _instances_in(item, f"{path}.[{index}]")
