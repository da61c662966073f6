"""X-Request-Id: the id every HTTP answer carries, to find a request in the logs.

A client (or a proxy in front of Flint) may choose it: a sane value (visible ASCII, at most
MAX_LENGTH characters) is echoed; anything else, or none, gets a new one. While the request
is served, `current_request_id()` gives it to the log records of whatever runs for it (the
tasks it starts inherit the context).

A client's id is only echoed and logged, never used for engine requests or response ids
(`chatcmpl-…`, stored completions): two requests in flight may carry the same one (a retry,
a proxy that reuses ids), and the engine refuses a duplicate request id. An id Flint made
is unique, so it names the generation as well (`engine_request_id`): the header then
matches the response's own id."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from litestar import Request

HEADER = "x-request-id"
MAX_LENGTH = 128
SANE_ID = re.compile(rf"[!-~]{{1,{MAX_LENGTH}}}")  # visible ASCII: no spaces, controls or line breaks
# Keys in the ASGI scope's state.
_ID, _MADE_HERE = "flint_request_id", "flint_request_id_made_here"

_current: ContextVar[str | None] = ContextVar("flint_request_id", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def chosen_request_id(headers: list[tuple[bytes, bytes]]) -> tuple[str, bool]:
    """The request's id from its raw ASGI headers, and whether Flint made it (the client
    sent none, or none that is sane)."""
    for name, value in headers:
        if name.lower() == HEADER.encode():
            text = value.decode("latin-1")
            if SANE_ID.fullmatch(text):
                return text, False
            break  # only the first one counts
    return new_request_id(), True


def remember(scope: dict, request_id: str, made_here: bool) -> None:
    """Keep the id in the request's scope, for handlers (`engine_request_id`)."""
    state = scope.setdefault("state", {})
    state[_ID], state[_MADE_HERE] = request_id, made_here


def engine_request_id(request: Request) -> str | None:
    """The id a generation may take as its own: the request's, when Flint made it; None
    when the client chose it (the generation then makes a fresh one)."""
    state = request.scope.get("state", {})
    return state.get(_ID) if state.get(_MADE_HERE) else None


def current_request_id() -> str | None:
    """The id of the HTTP request being served in this context, if any."""
    return _current.get()


@contextmanager
def serving(request_id: str) -> Iterator[None]:
    """`request_id` is the current one inside the block."""
    token = _current.set(request_id)
    try:
        yield
    finally:
        _current.reset(token)
