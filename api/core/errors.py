"""Errors of the API, and how each dialect shows them.

Routes raise ApiError (a refusal with its status and the field to blame) or let a
RequestValidationError (a schema violation) or an unexpected exception escape; an
`ErrorShape` turns each into the dialect's own error body. Every route has one: OpenAI's
`{"error": {"message", "type", "param", "code"}}` by default, with schema violations as 400
naming the field in `param` (as OpenAI, vLLM and llama.cpp answer); /v1/completions keeps the
Fireworks spec's 422 `{"detail": [...]}` and adds the same `error` object; /v1/messages has
Anthropic's shape (api/messages/errors.py). An unexpected exception is logged with its
traceback and answered 500 in the route's shape, so no input ever gets a bare error page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from litestar import Request, Response
from litestar.exceptions import HTTPException

from engine.async_engine import EngineDeadError
from generated.flint import ErrorDetail, ErrorResponse

log = logging.getLogger("flint")

ENGINE_FAILED = "The server failed: its engine could not load or stopped on an error. Retry shortly."


class ApiError(Exception):
    """A request the server refuses, with the HTTP status and the field to blame."""

    def __init__(self, status_code: int, message: str, *, param: str | None = None,
                 error_type: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.error_type = error_type
        self.code = code
        self.headers = headers or {}  # e.g. Retry-After on a 429 or 503

    @property
    def body(self) -> ErrorResponse:
        """The error in OpenAI's shape."""
        return ErrorResponse(error=ErrorDetail(message=self.message, type=self.error_type,
                                               param=self.param, code=self.code))


def invalid(field: str, message: str) -> ApiError:
    """A 400 blaming `field`."""
    return ApiError(400, message, param=field)


def model_not_found(model_id: str) -> ApiError:
    return ApiError(404, f"The model `{model_id}` does not exist.", param="model", code="model_not_found")


def engine_failed() -> ApiError:
    return ApiError(503, ENGINE_FAILED, error_type="service_unavailable", code="failed")


def generation_cut_off() -> ApiError:
    """A generation that broke off before it finished: the engine failed, or shutdown ended it."""
    return ApiError(503, "The generation was cut off before it finished: the server failed or is shutting "
                         "down. Retry shortly.", error_type="service_unavailable", code="cut_off")


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready (nobody reads the answer)."""


CLIENT_CLOSED_REQUEST = 499  # nginx's status for it, for the access log


class RequestValidationError(Exception):
    """A body (or query) that breaks its schema: pydantic's errors, located in the request."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors  # {"loc": ["body", field, ...], "msg", "type"}
        super().__init__("; ".join(f"{field_path(e['loc'])}: {e['msg']}" for e in errors))

    @classmethod
    def at(cls, loc: list[str | int], msg: str, error_type: str) -> RequestValidationError:
        """One error at `loc` (which starts with "body" or "query")."""
        return cls([{"loc": loc, "msg": msg, "type": error_type}])

    @classmethod
    def of(cls, error: pydantic.ValidationError, raw: Any, location: str = "body") -> RequestValidationError:
        """pydantic's errors on `raw`, each located by the keys and indices of `raw` itself:
        the names pydantic gives union branches (`messages.0.user.content`, `stop.str`) are
        no place in the request. Errors that then coincide are told once."""
        errors, seen = [], set()
        for detail in error.errors(include_url=False):
            loc = [location, *input_path(raw, detail["loc"])]
            if (key := (tuple(loc), detail["msg"])) not in seen:
                seen.add(key)
                errors.append({"loc": loc, "msg": detail["msg"], "type": detail["type"]})
        return cls(errors)

    @property
    def param(self) -> str | None:
        """The first error's field, in OpenAI's spelling (`messages.[0].content`)."""
        return field_path(self.errors[0]["loc"]) or None


def input_path(raw: Any, loc: tuple[str | int, ...]) -> list[str | int]:
    """The parts of `loc` that are keys or indices of `raw`, and a last part that names a
    missing or unknown field; the rest are pydantic's names for union branches."""
    return located(raw, tuple(loc))[0]


# How well a reading of a location fits the input: its last part dropped, naming a missing
# key of an object, or naming a key the input has.
DROPPED, MISSING, PRESENT = 0, 1, 2


def located(node: Any, loc: tuple[str | int, ...]) -> tuple[list[str | int], int]:
    """The path `loc` names in `node`, and how well it fits. A part that is both a key of
    an object and its tag value (`{"type": "thinking", "thinking": "..."}`) may be either
    the key or pydantic's name for the tagged union's branch: the reading that fits the
    rest of the location better wins, the key on a tie. So a thinking block without its
    `signature` is blamed at `signature`, not inside its `thinking` text."""
    if not loc:
        return [], PRESENT
    part, rest = loc[0], loc[1:]
    if not is_member(node, part):
        if rest:
            return located(node, rest)  # a branch name
        return ([part], MISSING) if isinstance(node, dict) else ([], DROPPED)
    path, fit = located(node[part], rest) if rest else ([], PRESENT)
    as_key = ([part, *path], fit)
    if not rest or not isinstance(node, dict) or part not in node.values():
        return as_key
    as_branch = located(node, rest)
    return as_branch if as_branch[1] > as_key[1] else as_key


def is_member(node: Any, part: str | int) -> bool:
    """Whether `part` is a key of the object `node` or an index of the array `node`."""
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def field_path(loc: list[str | int]) -> str:
    """A pydantic location without its "body"/"query" head, as OpenAI names fields."""
    return ".".join(f"[{part}]" if isinstance(part, int) else str(part) for part in loc[1:])


def status_error_type(status_code: int) -> str:
    """OpenAI's error type for a status Flint answers without a more specific one."""
    if status_code == 404:
        return "not_found_error"
    return "server_error" if status_code >= 500 else "invalid_request_error"


@dataclass(frozen=True)
class ErrorShape:
    """How one dialect writes errors: `write(status, message, param, error_type, code)`."""

    write: Callable[..., dict[str, Any]]
    schema_status: int  # the status of a schema violation
    schema_body: Callable[[RequestValidationError], dict[str, Any]] | None = None

    def handlers(self) -> dict[type[BaseException], Callable[[Request, Any], Response]]:
        """Litestar exception handlers answering every error in this shape."""
        return {ApiError: self._api_error, RequestValidationError: self._schema_error,
                HTTPException: self._http_error, EngineDeadError: self._engine_dead,
                ClientDisconnected: self._disconnected, Exception: self._unexpected}

    def response(self, error: ApiError) -> Response:
        body = self.write(error.status_code, error.message, error.param, error.error_type, error.code)
        return Response(body, status_code=error.status_code, headers=error.headers)

    def _api_error(self, _: Request, error: ApiError) -> Response:
        return self.response(error)

    def _schema_error(self, _: Request, error: RequestValidationError) -> Response:
        if self.schema_body is not None:
            return Response(self.schema_body(error), status_code=self.schema_status)
        return self.response(ApiError(self.schema_status, str(error), param=error.param))

    def _http_error(self, _: Request, error: HTTPException) -> Response:
        """Litestar's own errors (unknown route, wrong method, a body over the size limit)."""
        headers = dict(error.headers or {})
        return self.response(ApiError(error.status_code, error.detail, headers=headers,
                                      error_type=status_error_type(error.status_code)))

    def _engine_dead(self, _: Request, error: EngineDeadError) -> Response:
        return self.response(engine_failed())

    def _disconnected(self, _: Request, error: ClientDisconnected) -> Response:
        return Response(b"", status_code=CLIENT_CLOSED_REQUEST)

    def _unexpected(self, request: Request, error: Exception) -> Response:
        log.error("unexpected error answering %s %s", request.method, request.url.path, exc_info=error)
        return self.response(ApiError(500, "The server had an internal error while handling the request.",
                                      error_type="server_error"))


def openai_error(status_code: int, message: str, param: str | None, error_type: str,
                 code: str | None) -> dict[str, Any]:
    body = ErrorResponse(error=ErrorDetail(message=message, type=error_type, param=param, code=code))
    return body.model_dump(mode="json")


def fireworks_schema_body(error: RequestValidationError) -> dict[str, Any]:
    """The Fireworks spec's HTTPValidationError `detail`, plus OpenAI's `error` object for
    clients that read `error.message`."""
    error_object = openai_error(422, str(error), error.param, "invalid_request_error", None)
    return {"detail": error.errors, **error_object}


def handlers_by_path(default: ErrorShape, prefixed: Mapping[str, ErrorShape]) -> dict[type[BaseException], Callable]:
    """App-level exception handlers answering in the shape of the path's dialect: a request
    to `prefix` or below it takes `prefixed[prefix]`, any other `default`. They answer what
    no route's own handlers saw: an unknown path, a method the path does not serve."""
    def shape_of(request: Request) -> ErrorShape:
        path = request.url.path.rstrip("/")
        return next((shape for prefix, shape in prefixed.items() if path == prefix or path.startswith(prefix + "/")),
                    default)

    def handler(kind: type[BaseException]) -> Callable[[Request, Any], Response]:
        return lambda request, error: shape_of(request).handlers()[kind](request, error)

    return {kind: handler(kind) for kind in default.handlers()}


OPENAI_ERRORS = ErrorShape(write=openai_error, schema_status=400)
FIREWORKS_ERRORS = ErrorShape(write=openai_error, schema_status=422, schema_body=fireworks_schema_body)
