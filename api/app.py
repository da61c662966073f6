"""create_app(settings): the Litestar application and its life cycle."""

from __future__ import annotations

from litestar import Litestar, Router
from litestar.datastructures import State

from api.errors import EXCEPTION_HANDLERS
from api.lifecycle import EngineFactory, EngineLifecycle, load_engine
from api.routes import health, models
from api.settings import Settings
from api.state import ServerState
from engine.loader.source import resolve_model

# `/v1` is the path every OpenAI-compatible client uses; `/inference/v1` is the Fireworks
# base URL, so clients configured for Fireworks work unchanged.
API_PREFIXES = ("/v1", "/inference/v1")
API_HANDLERS = [models.list_models, models.retrieve_model]


def create_app(settings: Settings, engine_factory: EngineFactory = load_engine) -> Litestar:
    """An app serving the model that `settings.model` names (the embedded one if None).

    The engine loads in the background after startup; `app.state.lifecycle` can be awaited
    (`wait_until_serving`) by callers that need it running."""
    server = ServerState(model=resolve_model(settings.model))
    lifecycle = EngineLifecycle(server, settings, engine_factory)
    routers = [Router(prefix, route_handlers=API_HANDLERS) for prefix in API_PREFIXES]
    return Litestar(
        route_handlers=[health.health, *routers],
        state=State({"server": server, "lifecycle": lifecycle}),
        on_startup=[lifecycle.start],
        on_shutdown=[lifecycle.stop],
        exception_handlers=EXCEPTION_HANDLERS,
    )
