"""Admission control: 503 before the engine runs, once shutdown began or after it failed;
429 when the engine requests a request makes would queue past `--max-waiting`.

The API counts the engine requests (choices: prompts x n) it has admitted and not yet seen
end, on the event loop, so a burst is counted at once: a check and its increment have no
await between them. The engine runs `max_num_seqs` of them at a time and queues the rest.

The priority service tier (api/core/tenancy.py) is counted on its own: a priority request is
refused only when priority requests alone fill `max_num_seqs + max_waiting`, so default-tier
requests filling the queue never turn one away (the queue may then hold up to twice
`max_waiting`). A default-tier request counts every admitted request, of either tier.
"""

from __future__ import annotations

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from api.core.errors import ApiError, engine_failed
from api.core.state import ServerState

# Seconds a client should wait before retrying a full queue; a CPU step takes tenths of a
# second, so by then a few requests have usually finished.
RETRY_AFTER_FULL = 1
# While the model loads and compiles (seconds to minutes).
RETRY_AFTER_STARTING = 5
# While the server sleeps for a training step, or changes its weights (seconds).
RETRY_AFTER_ASLEEP = 5


def require_serving(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """A Litestar guard for the API routes: 503 unless the engine is serving."""
    phase = connection.app.state.server.phase
    if phase == "starting":
        raise ApiError(503, "The server is starting: the model is still loading. Retry shortly.",
                       error_type="service_unavailable", code="starting",
                       headers={"Retry-After": str(RETRY_AFTER_STARTING)})
    if phase == "failed":
        raise engine_failed()
    if phase != "ok":
        raise ApiError(503, f"The server is not serving ({phase}).", error_type="service_unavailable",
                       code=phase)


def admit(server: ServerState, num_choices: int, priority: bool = False) -> None:
    """Count `num_choices` engine requests in, or refuse with 429 and Retry-After when they
    would queue past `max_waiting` behind the running batch (a priority request: behind the
    priority tier's). A request is always admitted into an idle server, however many
    choices it has (at most MAX_CHOICES)."""
    limits = server.settings
    capacity = limits.engine.max_num_seqs + limits.max_waiting
    admitted = server.num_admitted_priority if priority else server.num_admitted_choices
    if admitted and admitted + num_choices > capacity:
        waiting = max(0, admitted - limits.engine.max_num_seqs)
        raise ApiError(429, f"The server is at capacity: {waiting} requests are waiting "
                       f"(limit {limits.max_waiting}). Retry after a moment.", error_type="requests",
                       code="rate_limit_exceeded", headers={"Retry-After": str(RETRY_AFTER_FULL)})
    server.num_admitted_choices += num_choices
    if priority:
        server.num_admitted_priority += num_choices


def release(server: ServerState, num_choices: int, priority: bool = False) -> None:
    """Count ended engine requests out."""
    server.num_admitted_choices -= num_choices
    if priority:
        server.num_admitted_priority -= num_choices
