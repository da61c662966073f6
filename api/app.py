"""create_app(settings): the Litestar application and its life cycle."""

from __future__ import annotations

from litestar import Litestar, Router
from litestar.datastructures import State

from api.admission import require_serving
from api.auth import api_key_guard
from api.errors import EXCEPTION_HANDLERS
from api.lifecycle import EngineFactory, EngineLifecycle, load_engine
from api.registry import load_dialects
from api.routes import chat, completions, health, metrics, models, tokens
from api.routes.messages import create_message
from api.routes.responses import RESPONSES_HANDLERS
from api.routes.stored_chat import STORED_CHAT_HANDLERS
from api.settings import Settings
from api.state import ServerState
from engine.loader.source import resolve_model

# `/v1` is the path every OpenAI-compatible client uses; `/inference/v1` is the Fireworks
# base URL, so clients configured for Fireworks work unchanged.
API_PREFIXES = ("/v1", "/inference/v1")
API_HANDLERS = [models.list_models, models.retrieve_model, tokens.tokenize_prompt, tokens.detokenize,
                chat.create_chat_completion, completions.create_completion, *STORED_CHAT_HANDLERS,
                create_message, *RESPONSES_HANDLERS]


def create_app(settings: Settings, engine_factory: EngineFactory = load_engine) -> Litestar:
    """An app serving the model that `settings.model` names (the embedded one if None).

    The engine loads in the background after startup; `app.state.lifecycle` can be awaited
    (`wait_until_serving`) by callers that need it running."""
    load_dialects()  # the field registry the routes' refusal checks read
    model = resolve_model(settings.model)
    settings = settings.served(model.context_length)
    server = ServerState(model=model, settings=settings)
    lifecycle = EngineLifecycle(server, settings, engine_factory)
    # /health and /metrics stay outside the routers: open, and answering while starting.
    guards = [api_key_guard(settings.api_key)] if settings.api_key else []
    guards.append(require_serving)
    routers = [Router(prefix, route_handlers=API_HANDLERS, guards=guards) for prefix in API_PREFIXES]
    return Litestar(
        route_handlers=[health.health, metrics.metrics, *routers],
        state=State({"server": server, "lifecycle": lifecycle}),
        on_startup=[lifecycle.start],
        on_shutdown=[lifecycle.stop],
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_body_bytes,
    )
