"""No key is silently dropped at any depth: for every model a route's request body can hold,
a valid body holding it, with one unknown key added to it, is refused with an error located
at that key. The bodies are built from the models themselves (each model at the first path
where a valid body holds it), so a spec change is walked too. Bodies go through each route's
own reading of them rather than HTTP: it is what the routes run first, and it is fast."""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

import annotated_types
import pydantic
import pytest

from api.chat import body as chat
from api.completions import body as completions
from api.core.errors import ApiError, RequestValidationError, field_path
from api.core.structured import format_grammar
from api.core.validation import parse_body
from api.messages import body as messages
from api.responses import body as responses
from api.tokens import body as tokens
from generated.openai_chat_completions import UpdateChatCompletionRequest
from completions_helpers import MODEL

UNKNOWN = "flint_unknown_key"
MAX_DEPTH = 12  # deeper than any path to a model the specs define, short of recursion
USER_HI = [{"role": "user", "content": "hi"}]

Variant = tuple[Any, tuple[str | int, ...], type[pydantic.BaseModel]]  # (value, path to an object, its model)


def with_format(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`parse`, then the reading of `response_format`, as planning reads it: where a
    dialect's format object holds any keys (Fireworks' `json_schema`), only its reading
    can tell an unknown key from a schema keyword."""
    def parse_and_read(raw: Any) -> Any:
        body = parse(raw)
        format_grammar(body.response_format, "response_format")
        return body
    return parse_and_read


# route -> (how the route reads its body, the model it validates against, a minimal valid body)
ROUTES: dict[str, tuple[Callable[[Any], Any], type[pydantic.BaseModel], dict[str, Any]]] = {
    "/v1/completions": (with_format(completions.parse), completions.CompletionsBody,
                        {"model": MODEL, "prompt": "hi"}),
    "/v1/chat/completions": (with_format(chat.parse), chat.ChatCompletionBody, {"model": MODEL, "messages": USER_HI}),
    "/v1/responses": (responses.parse, responses.CreateResponseRequest, {"model": MODEL, "input": "hi"}),
    "/v1/messages": (messages.parse, messages.MessagesBody, {"model": MODEL, "max_tokens": 4, "messages": USER_HI}),
    "/v1/messages/count_tokens": (messages.parse_count, messages.CountMessageTokensRequest,
                                  {"model": MODEL, "messages": USER_HI}),
    "/v1/tokenize (prompt)": (tokens.parse_tokenize, tokens.TokenizeCompletionRequest, {"prompt": "hi"}),
    "/v1/tokenize (messages)": (tokens.parse_tokenize, tokens.TokenizeChatRequest, {"messages": USER_HI}),
    "/v1/detokenize": (lambda raw: tokens.parse_detokenize(raw, 100, 100), tokens.DetokenizeRequest,
                       {"tokens": [1]}),
    "POST /v1/chat/completions/{id}": (lambda raw: parse_body(UpdateChatCompletionRequest, raw),
                                       UpdateChatCompletionRequest, {"metadata": {}}),
}


def unwrapped(tp: Any) -> tuple[Any, list[Any]]:
    """A type without its Annotated layers, and their constraints."""
    constraints = []
    while typing.get_origin(tp) is Annotated:
        for item in tp.__metadata__:
            constraints.extend(item.metadata if isinstance(item, pydantic.fields.FieldInfo) else [item])
        tp = tp.__args__[0]
    return tp, constraints


def union_args(tp: Any) -> tuple[Any, ...] | None:
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else None


def is_subclass(tp: Any, base: type = pydantic.BaseModel) -> bool:
    return isinstance(tp, type) and issubclass(tp, base)


def is_free_form(model: type[pydantic.BaseModel]) -> bool:
    """A model that takes any keys (a JSON Schema, metadata): nothing in it is unknown."""
    return model.model_config.get("extra") == "allow"


def fields_of(model: type[pydantic.BaseModel]) -> Iterator[tuple[str, Any, bool]]:
    """(key in JSON, annotated type, required) of each field of `model`."""
    for name, info in model.model_fields.items():
        tp = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        yield info.alias or name, tp, info.is_required()


def minimal(tp: Any) -> Any:
    """A small JSON value of type `tp` (its constraints kept)."""
    tp, constraints = unwrapped(tp)
    bounds = {type(c): c for c in constraints}
    if (args := union_args(tp)) is not None:  # null where allowed, else a scalar before an object
        return None if type(None) in args else minimal(sorted(args, key=is_subclass)[0])
    if is_subclass(tp, pydantic.RootModel):
        return minimal(tp.model_fields["root"].annotation)
    if is_subclass(tp):
        return {key: minimal(field_type) for key, field_type, required in fields_of(tp) if required}
    if typing.get_origin(tp) is Literal:
        return tp.__args__[0]
    if is_subclass(tp, enum.Enum):
        return next(iter(tp)).value
    if tp in (int, float):
        return number(tp, bounds)
    if tp is str:
        return "x" * getattr(bounds.get(annotated_types.MinLen), "min_length", 1)
    if tp is bool:
        return False
    if typing.get_origin(tp) is list:
        return [minimal(typing.get_args(tp)[0])] * getattr(bounds.get(annotated_types.MinLen), "min_length", 0)
    if typing.get_origin(tp) is dict or tp is Any:
        return {}
    return None


def number(tp: type, bounds: dict[type, Any]) -> int | float:
    value = 1
    if ge := bounds.get(annotated_types.Ge):
        value = max(value, ge.ge)
    if gt := bounds.get(annotated_types.Gt):
        value = max(value, gt.gt + 1 if tp is int else gt.gt + 0.5)
    if le := bounds.get(annotated_types.Le):
        value = min(value, le.le)
    return tp(value)


def variants(tp: Any, depth: int = 0, above: frozenset = frozenset()) -> Iterator[Variant]:
    """Small JSON values of type `tp`, each holding an object of some model at some path:
    one for every path to every model `tp` can hold (a model met again below itself is
    not followed further)."""
    tp, _ = unwrapped(tp)
    if depth > MAX_DEPTH:
        return
    if (args := union_args(tp)) is not None:
        for arg in args:
            yield from variants(arg, depth, above)
    elif is_subclass(tp, pydantic.RootModel):
        yield from variants(tp.model_fields["root"].annotation, depth, above)
    elif is_subclass(tp):
        if tp in above or is_free_form(tp):
            return
        base = minimal(tp)
        yield base, (), tp
        for key, field_type, _ in fields_of(tp):
            for value, path, model in variants(field_type, depth + 1, above | {tp}):
                yield {**base, key: value}, (key, *path), model
    elif typing.get_origin(tp) is list:
        for value, path, model in variants(typing.get_args(tp)[0], depth + 1, above):
            yield [value], (0, *path), model
    elif typing.get_origin(tp) is dict:
        for value, path, model in variants(typing.get_args(tp)[1], depth + 1, above):
            yield {"k": value}, ("k", *path), model


def with_unknown_key(body: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    """A copy of `body` whose object at `path` has one key more."""
    if not path:
        return {**body, UNKNOWN: 1}
    head, *rest = path
    copy = list(body) if isinstance(body, list) else dict(body)
    copy[head] = with_unknown_key(body[head], tuple(rest))
    return copy


def accepted(parse: Callable[[Any], Any], body: dict[str, Any]) -> bool:
    try:
        parse(body)
    except Exception:  # a body the generator got wrong (a pattern, a cross-field rule): not a witness
        return False
    return True


def walk(route: str) -> tuple[set[type], list[str]]:
    """The models of `route` that a valid body reached, and each reached object whose
    unknown key was not refused where it is."""
    parse, model, base = ROUTES[route]
    reached, missed = set(), []
    for key, field_type, _ in fields_of(model):
        for value, path, nested in variants(field_type):
            body = {**base, key: value}
            if nested in reached or not accepted(parse, body):
                continue
            reached.add(nested)
            loc = ["body", key, *path, UNKNOWN]
            try:
                parse(with_unknown_key(body, (key, *path)))
                missed.append(f"{field_path(loc)} ({nested.__name__}): accepted")
            except (RequestValidationError, ApiError) as error:
                if not refused_at(error, loc):
                    missed.append(f"{field_path(loc)} ({nested.__name__}): {error}")
    return reached, missed


def refused_at(error: RequestValidationError | ApiError, loc: list[str | int]) -> bool:
    """Whether `error` blames the key at `loc`: a schema error there, or a 400 naming it."""
    if isinstance(error, ApiError):
        return error.status_code == 400 and error.param == field_path(loc)
    return any(detail["loc"] == loc for detail in error.errors)


def closed_models(tp: Any, found: set[type] | None = None) -> set[type]:
    """Every model `tp` can hold that does not take any keys."""
    found = set() if found is None else found
    tp, _ = unwrapped(tp)
    inner = union_args(tp) or typing.get_args(tp)
    if is_subclass(tp, pydantic.RootModel):
        inner = (tp.model_fields["root"].annotation,)
    elif is_subclass(tp):
        if tp in found or is_free_form(tp):
            return found
        found.add(tp)
        inner = tuple(field_type for _, field_type, _ in fields_of(tp))
    for arg in inner:
        closed_models(arg, found)
    return found


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_key_in_any_object_is_refused_where_it_is(route):
    parse, model, base = ROUTES[route]
    assert accepted(parse, base)
    with pytest.raises(RequestValidationError) as error:
        parse({**base, UNKNOWN: 1})
    assert error.value.errors[0]["loc"] == ["body", UNKNOWN]
    reached, missed = walk(route)
    assert not missed, "\n".join(missed)
    nested = set().union(*(closed_models(field_type) for _, field_type, _ in fields_of(model)))
    assert not {m.__name__ for m in nested - reached}, "no valid body was built to hold these"
