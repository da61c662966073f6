"""create_app(settings): the Litestar application, its routes and its life cycle."""

from __future__ import annotations

from litestar import Litestar, Router
from litestar.datastructures import State

from api.adapters import route as adapters
from api.chat import route as chat
from api.completions import route as completions
from api.core.admission import require_serving
from api.core.errors import OPENAI_ERRORS, handlers_by_path
from api.core.registry import Registry
from api.core.state import ServerState
from api.embeddings import fields as embedding_fields
from api.embeddings import route as embeddings
from api.messages import route as messages
from api.messages.errors import ANTHROPIC_ERRORS
from api.responses import route as responses
from api.routes import health, metrics, models, openapi
from api.server.auth import api_key_guard
from api.server.cors import cors_config
from api.server.lifecycle import EngineFactory, EngineLifecycle, kept_dir, load_engine
from api.server.logs import logging_config
from api.server.middleware import wrap_app
from api.server.settings import Settings
from api.tokens import route as tokens
from api.weights import route as weights
from api.ui import route as ui
from engine.loader.source import resolve_model

# `/v1` is the path every OpenAI-compatible client uses; `/inference/v1` is the Fireworks
# base URL, so clients configured for Fireworks work unchanged.
API_PREFIXES = ("/v1", "/inference/v1")
API_HANDLERS = [models.list_models, models.retrieve_model, *tokens.HANDLERS, *completions.HANDLERS,
                *chat.HANDLERS, *responses.HANDLERS, *messages.HANDLERS, *adapters.HANDLERS,
                *embeddings.HANDLERS, *weights.V1_HANDLERS]
# Generated request models whose routes this server does not have yet, and why; once a
# route serves one, its entry goes and its fields get a table (tests/api/test_field_registry.py).
NOT_SERVED: dict[type, str] = {}
# Paths whose every error takes a dialect's own shape, routed or not (an unknown path below
# them, a method they do not serve); errors elsewhere take OpenAI's.
ERROR_SHAPES = {prefix + messages.PATH: ANTHROPIC_ERRORS for prefix in API_PREFIXES}
# Every route's field registry, for the checks that walk them all.
REGISTRY = Registry.combined([completions.COMPLETIONS.registry, chat.CHAT.registry, responses.RESPONSES.registry,
                              messages.MESSAGES.registry, tokens.REGISTRY, adapters.REGISTRY, embedding_fields.REGISTRY,
                              weights.REGISTRY,
                              Registry(not_served=NOT_SERVED)])


def create_app(settings: Settings, engine_factory: EngineFactory = load_engine) -> Litestar:
    """An app serving the model that `settings.model` names (the embedded one if None).

    The engine loads in the background after startup; `app.state.lifecycle` can be awaited
    (`wait_until_serving`) by callers that need it running."""
    model = resolve_model(settings.model, settings.download, kept_in=kept_dir(settings))
    settings = settings.served(model.context_length)
    server = ServerState(model=model, settings=settings)
    lifecycle = EngineLifecycle(server, settings, engine_factory)
    # /health, /metrics and the chat page (api/ui/) stay outside the routers: open, and
    # answering while starting.
    guards = [api_key_guard(settings.valid_api_keys)] if settings.valid_api_keys else []
    guards.append(require_serving)
    routers = [Router(prefix, route_handlers=API_HANDLERS, guards=guards) for prefix in API_PREFIXES]
    # The tokenizer routes also at the root, where vLLM serves them (lm-eval's remote tokenizer).
    # Rerank also where Jina's and vLLM's clients (/rerank) and Cohere's v2 client (/v2/rerank) post it.
    # vLLM's sleep routes at the root, where its RL integrations call them.
    routers.append(Router("/", route_handlers=[*tokens.HANDLERS, embeddings.rerank, *weights.ROOT_HANDLERS],
                          guards=guards))
    routers.append(Router("/v2", route_handlers=[embeddings.rerank], guards=guards))
    # Friendli's serverless base URL, for clients of its token_sampled / complete events.
    routers.append(Router(completions.SERVERLESS_PREFIX, route_handlers=completions.SERVERLESS_HANDLERS, guards=guards))
    # Every answer, routed or not, carries X-Request-Id and is logged (api/server/middleware.py).
    return wrap_app(Litestar(
        route_handlers=[health.health, metrics.metrics, openapi.openapi_json, *ui.HANDLERS, *routers],
        state=State({"server": server, "lifecycle": lifecycle}),
        on_startup=[lifecycle.start],
        on_shutdown=[lifecycle.stop],
        exception_handlers=handlers_by_path(OPENAI_ERRORS, ERROR_SHAPES),
        request_max_body_size=settings.max_body_bytes,
        cors_config=cors_config(settings.allowed_origins),
        openapi_config=None,  # Litestar's own /schema would contradict /openapi.json (api/openapi/contract.py)
        logging_config=logging_config(settings.log_format),
    ))
