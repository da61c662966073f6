"""Admission control: 503 before the engine runs or once shutdown began, 429 when its queue is full."""

from __future__ import annotations

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from api.errors import ApiError
from api.state import ServerState

# Seconds a client should wait before retrying a full queue; a CPU step takes tenths of a
# second, so by then a few requests have usually finished.
RETRY_AFTER_FULL = 1
# While the model loads and compiles (seconds to minutes).
RETRY_AFTER_STARTING = 5


def require_serving(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """A Litestar guard for the API routes: 503 unless the engine is serving."""
    phase = connection.app.state.server.phase
    if phase == "starting":
        raise ApiError(503, "The server is starting: the model is still loading. Retry shortly.",
                       error_type="service_unavailable", code="starting",
                       headers={"Retry-After": str(RETRY_AFTER_STARTING)})
    if phase != "ok":
        raise ApiError(503, f"The server is not serving ({phase}).", error_type="service_unavailable",
                       code=phase)


def admit(server: ServerState) -> None:
    """Refuse a generation request with 429 and Retry-After when it would have to queue and
    `max_waiting` requests already do. Generation routes call this before handing a request
    to the engine (so `--max-waiting 0` still serves whatever fits the running batch)."""
    load = server.engine_stats()
    limit = server.settings.max_waiting
    batch_is_full = load.num_running + load.num_waiting >= server.settings.engine.max_num_seqs
    if batch_is_full and load.num_waiting >= limit:
        raise ApiError(429, f"The server is at capacity: {load.num_waiting} requests are waiting "
                       f"(limit {limit}). Retry after a moment.", error_type="requests",
                       code="rate_limit_exceeded", headers={"Retry-After": str(RETRY_AFTER_FULL)})
