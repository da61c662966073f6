"""The field registry: for every field of every request model a route serves, what handles it.

Each dialect declares its table in its fields.py, one `ModelFields` per request model, and
builds its `Registry` from them. A field is one of:
- `Sampled(attribute)`: the SamplingParams attribute of that name (by default the field's
  own), the value checked against the bounds declared on SamplingParams;
- `Stopping(attribute)`: the same for a StopCriteria attribute;
- `Planned(step, test)`: a step of the dialect's plan, named `module.function` within the
  dialect's package (`plan.stop_strings`), with the test that proves it;
- `Accepted(reason)`: a value that asks for nothing this server would do differently;
- `Refused(reason, applies)`: a 400 naming the field, for the values `applies` picks (by
  default any non-null value; a value that asks for nothing passes).

Planning reads the table (api/core/sampling.py collects the Sampled and Stopping fields), so
no second list of field names exists. `refuse_within` raises the 400 for a refused field
anywhere in a request, and for a given field that no table lists (a field a spec change
added, until someone decides); tests/api/test_field_registry.py fails on any field of a
served request model that is in no table.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from api.core.errors import ApiError


def given(value: Any) -> bool:
    """The default refusal condition: the client sent a value (null counts as absent)."""
    return value is not None


@dataclass(frozen=True)
class Sampled:
    """The field is SamplingParams.<attribute> (None: the field's own name)."""

    attribute: str | None = None


@dataclass(frozen=True)
class Stopping:
    """The field is StopCriteria.<attribute> (None: the field's own name)."""

    attribute: str | None = None


@dataclass(frozen=True)
class Planned:
    """A step of the dialect's plan handles the field: `step` is `module.function` within
    the dialect's package; `test` ("tests/...py::test_name") proves it."""

    step: str
    test: str


@dataclass(frozen=True)
class Accepted:
    """Any value asks for nothing this server would do differently (and why)."""

    reason: str


@dataclass(frozen=True)
class Refused:
    """A refused field: why, and for which values (by default any non-null value)."""

    reason: str
    applies: Callable[[Any], bool] = given


Decision = Sampled | Stopping | Planned | Accepted | Refused
EngineField = Sampled | Stopping


@dataclass(frozen=True)
class ModelFields:
    """The decisions on one request model's fields. `like`: a model whose decisions apply to
    the fields both have (a subset schema served by the same route); `fields` come on top."""

    model: type[pydantic.BaseModel]
    fields: Mapping[str, Decision | str] = field(default_factory=dict)
    like: type[pydantic.BaseModel] | None = None


def every_field(model: type[pydantic.BaseModel], decision: Decision | str) -> ModelFields:
    """A table deciding each field of `model` the same way."""
    return ModelFields(model, {name: decision for name in model.model_fields})


def model_key(model_cls: type) -> str:
    """`fireworks_completions.CompletionRequest`: stable across re-imports of a regenerated module."""
    return f"{model_cls.__module__.rsplit('.', 1)[-1]}.{model_cls.__qualname__}"


class Registry:
    """The decisions of a set of tables, by request model."""

    def __init__(self, tables: Iterable[ModelFields] = (), not_served: Mapping[type, str] | None = None):
        self._decisions: dict[str, dict[str, Decision]] = {}
        self._not_served = {model_key(model): reason for model, reason in (not_served or {}).items()}
        for table in tables:
            self._add(table)

    @classmethod
    def combined(cls, registries: Iterable[Registry]) -> Registry:
        """One registry holding every table of `registries` (for the checks over all routes)."""
        combined = cls()
        for registry in registries:
            for key, decisions in registry._decisions.items():
                combined._decisions.setdefault(key, {}).update(decisions)
            combined._not_served.update(registry._not_served)
        return combined

    def _add(self, table: ModelFields) -> None:
        decisions = self._decisions.setdefault(model_key(table.model), {})
        if table.like is not None:
            inherited = self.decisions(table.like)
            decisions.update({name: inherited[name] for name in table.model.model_fields if name in inherited})
        decisions.update({name: Refused(d) if isinstance(d, str) else d for name, d in table.fields.items()})

    def decisions(self, model_cls: type) -> Mapping[str, Decision]:
        return self._decisions.get(model_key(model_cls), {})

    def not_served_reason(self, model_cls: type) -> str | None:
        return self._not_served.get(model_key(model_cls))

    def tables(self) -> Iterator[tuple[str, str, Decision]]:
        """(model key, field, decision) of every entry."""
        for key, decisions in self._decisions.items():
            for name, decision in decisions.items():
                yield key, name, decision

    def decision(self, models: Sequence[type], name: str, value: Any = None) -> Decision | None:
        """What handles field `name` of a body served as `models` (a merged body names the
        models it merges): a refusal that applies to `value` wins, else the first handler."""
        found = [self.decisions(model).get(name) for model in models if name in model.model_fields]
        found = [d for d in found if d is not None]
        refusal = next((d for d in found if isinstance(d, Refused) and d.applies(value)), None)
        handler = next((d for d in found if not isinstance(d, Refused)), None)
        return refusal or handler or next(iter(found), None)

    def engine_fields(self, models: Sequence[type], fields_set: Iterable[str]) -> dict[str, EngineField]:
        """The given fields that are SamplingParams or StopCriteria attributes, by field name."""
        found = {}
        for name in fields_set:
            decision = self.decision(models, name)
            if isinstance(decision, (Sampled, Stopping)):
                found[name] = decision
        return found

    def refuse_unsupported(self, models: Sequence[type], fields_set: Iterable[str], values: Mapping[str, Any],
                           location: str = "") -> None:
        """Raise a 400 naming the first given field that `models` refuse, or that no table
        lists. `location`: the path of the object holding them, prefixed to the field's name."""
        for name in sorted(fields_set):
            decision = self.decision(models, name, values.get(name))
            if isinstance(decision, Refused) and decision.applies(values.get(name)):
                raise ApiError(400, f"`{location}{name}` is not supported: {decision.reason}", param=location + name)
            if decision is None:
                raise ApiError(400, f"`{location}{name}` is not handled by this server yet", param=location + name)

    def refuse_within(self, request: pydantic.BaseModel, location: str = "",
                      models: Sequence[type] | None = None) -> None:
        """`refuse_unsupported` for `request` and every model instance its given fields hold
        (a message, a content part, stream_options), each error naming the field's path in
        OpenAI's spelling: `messages.[0].content.[1].image_url`. `models`: the tables that
        apply to `request` itself (by default its own class's)."""
        models = list(models or [type(request)])
        values = request.__dict__  # the field values, read without deprecated fields' warnings
        # A free-form object (a JSON Schema, metadata) holds data, not fields: its extra keys
        # are its content, and only the fields its model declares are decided.
        given = request.model_fields_set & type(request).model_fields.keys()
        self.refuse_unsupported(models, given, values, location)
        for name in sorted(given):
            if isinstance(self.decision(models, name, values[name]), Refused):
                continue  # an accepted value of a refused field holds nothing more to check
            for child, path in instances_in(values[name], location + name):
                self.refuse_within(child, path + ".")

    def unregistered_fields(self, model_cls: type[pydantic.BaseModel]) -> list[str]:
        """`Model.field` for every field of `model_cls`, and of the request models its
        handled fields hold, that no table lists."""
        missing: list[str] = []
        for model in self.request_models_within(model_cls):
            known = self.decisions(model)
            missing += [f"{model.__qualname__}.{name}" for name in model.model_fields if name not in known]
        return missing

    def request_models_within(self, model_cls: type[pydantic.BaseModel]) -> list[type[pydantic.BaseModel]]:
        """`model_cls` and every model reachable through its handled (or unlisted) fields;
        a RootModel stands for the models of its root. Refused fields are not entered."""
        found: list[type[pydantic.BaseModel]] = []
        pending = [model_cls]
        while pending:
            model = pending.pop()
            if model in found:
                continue
            if issubclass(model, pydantic.RootModel):
                pending += models_in(model.model_fields["root"].annotation)
                continue
            found.append(model)
            known = self.decisions(model)
            for name, info in model.model_fields.items():
                if not isinstance(known.get(name), Refused):
                    pending += models_in(info.annotation)
        return found


def models_in(annotation: Any) -> list[type[pydantic.BaseModel]]:
    """The pydantic models inside a type (through unions, lists, dicts, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is not None:  # a union, list[...], dict[...], Annotated[...]
        return [model for arg in typing.get_args(annotation) for model in models_in(arg)]
    return []


def instances_in(value: Any, path: str) -> Iterator[tuple[pydantic.BaseModel, str]]:
    """The model instances inside a field's value, with their paths (RootModels unwrapped)."""
    if isinstance(value, pydantic.RootModel):
        yield from instances_in(value.root, path)
    elif isinstance(value, pydantic.BaseModel):
        yield value, path
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from instances_in(item, f"{path}.[{index}]")
