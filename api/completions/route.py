"""POST /v1/completions: text completions in the Fireworks and Friendli dialects.

Schema violations keep the Fireworks spec's 422 `{"detail": [...]}`, with OpenAI's `error`
object beside it (api/core/errors.py)."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.datastructures import State

from api.completions import body, fields, plan, render
from api.core.errors import FIREWORKS_ERRORS
from api.core.pipeline import Dialect, generate

COMPLETIONS = Dialect(parse=body.parse, models=body.MODELS, registry=fields.REGISTRY, plan=plan.plan_completion,
                      whole=render.whole, stream=render.completion_chunks, error_event=lambda error: error.body)


@post("/completions", status_code=200, exception_handlers=FIREWORKS_ERRORS.handlers())
async def create_completion(request: Request, state: State) -> Response:
    return await generate(COMPLETIONS, request, state.server)


HANDLERS = [create_completion]
