"""POST /v1/messages: Anthropic's Messages API, whole or streamed, and POST
/v1/messages/count_tokens, its prompt's token count; both with Anthropic-shaped errors."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.datastructures import State

from api.core.pipeline import Dialect, generate
from api.core.tenancy import anthropic_ask
from api.messages import body, count, fields, plan, render
from api.messages.errors import ANTHROPIC_ERRORS

MESSAGES = Dialect(parse=body.parse, models=body.MODELS, registry=fields.REGISTRY, plan=plan.plan_messages,
                   whole=render.whole, stream=render.stream, error_event=render.error_event, named_events=True,
                   ask=anthropic_ask)
# The path prefix whose every error, routed or not, takes Anthropic's shape (api/server/app.py).
PATH = "/messages"


@post("/messages", status_code=200, exception_handlers=ANTHROPIC_ERRORS.handlers())
async def create_message(request: Request, state: State) -> Response:
    return await generate(MESSAGES, request, state.server)


@post("/messages/count_tokens", status_code=200, exception_handlers=ANTHROPIC_ERRORS.handlers())
async def count_message_tokens(request: Request, state: State) -> Response:
    return Response(await count.answer(request, state.server))


HANDLERS = [create_message, count_message_tokens]
