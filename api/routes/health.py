"""GET /health: 200 while serving, 503 while starting, draining or failed."""

from __future__ import annotations

from litestar import Response, get
from litestar.datastructures import State

from generated.flint import HealthResponse


@get("/health", sync_to_thread=False)
def health(state: State) -> Response[HealthResponse]:
    phase = state.server.phase
    return Response(HealthResponse(status=phase), status_code=200 if phase == "ok" else 503)
