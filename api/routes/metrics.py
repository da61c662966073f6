"""GET /metrics: Prometheus text exposition (open without an API key, like /health)."""

from __future__ import annotations

from litestar import Response, get
from litestar.datastructures import State

from api.server.metrics import CONTENT_TYPE


@get("/metrics", sync_to_thread=False)
def metrics(state: State) -> Response[bytes]:
    server = state.server
    return Response(server.metrics.render(server.engine_stats(), state.lifecycle.engine_health(), server.phase),
                    media_type=CONTENT_TYPE)
