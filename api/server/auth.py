"""API keys: with `--api-key` (or FLINT_API_KEY) set, every /v1 request must present one.

`--api-key` may be given several times, and FLINT_API_KEY may hold several keys separated
by commas; a `--priority-api-key` is a valid key too, granted the priority service tier
(api/core/tenancy.py).

Clients send it the way their SDK does: `Authorization: Bearer <key>` (OpenAI) or
`x-api-key: <key>` (Anthropic). /health and /metrics stay open: load balancers and
Prometheus scrape them without credentials, and they reveal no prompts or outputs."""

from __future__ import annotations

from collections.abc import Iterable

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.types import Guard

from api.core.errors import ApiError
from api.core.tenancy import any_equal


def presented_key(connection: ASGIConnection) -> str | None:
    """The key the client sent, from either header; None when it sent none."""
    authorization = connection.headers.get("authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return connection.headers.get("x-api-key") or None


def api_key_guard(api_keys: Iterable[str]) -> Guard:
    """A Litestar guard answering 401 unless the request carries one of `api_keys`."""
    expected = tuple(api_keys)

    def require_api_key(connection: ASGIConnection, _: BaseRouteHandler) -> None:
        given = presented_key(connection)
        if given is None:
            raise unauthorized("You didn't provide an API key. Send it as `Authorization: Bearer <key>` "
                               "or in an `x-api-key` header.", code=None)
        # Compared in constant time with every key, so response times leak nothing of the keys.
        if not any_equal(given, expected):
            raise unauthorized("Incorrect API key provided.", code="invalid_api_key")

    return require_api_key


def unauthorized(message: str, code: str | None) -> ApiError:
    # OpenAI answers both cases with type invalid_request_error; the code tells them apart.
    return ApiError(401, message, code=code, headers={"WWW-Authenticate": "Bearer"})
