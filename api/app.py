"""create_app(settings): the Litestar application and its life cycle."""

from __future__ import annotations

from litestar import Litestar, Router
from litestar.datastructures import State

from api.errors import EXCEPTION_HANDLERS
from api.routes import health, models
from api.settings import Settings
from api.state import ServerState
from engine.loader.source import resolve_model

# `/v1` is the path every OpenAI-compatible client uses; `/inference/v1` is the Fireworks
# base URL, so clients configured for Fireworks work unchanged.
API_PREFIXES = ("/v1", "/inference/v1")
API_HANDLERS = [models.list_models, models.retrieve_model]


def create_app(settings: Settings) -> Litestar:
    """An app serving the model that `settings.model` names (the embedded one if None)."""
    server = ServerState(model=resolve_model(settings.model))

    def mark_serving() -> None:
        server.phase = "ok"

    def mark_draining() -> None:
        server.phase = "draining"

    routers = [Router(prefix, route_handlers=API_HANDLERS) for prefix in API_PREFIXES]
    return Litestar(
        route_handlers=[health.health, *routers],
        state=State({"server": server}),
        on_startup=[mark_serving],
        on_shutdown=[mark_draining],
        exception_handlers=EXCEPTION_HANDLERS,
    )
