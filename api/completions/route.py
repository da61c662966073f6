"""POST /v1/completions: text completions in the Fireworks and Friendli dialects; and POST
/serverless/v1/completions, the same request answered in Friendli's serverless shapes
(`token_sampled` / `complete` stream events, api/completions/serverless.py).

Schema violations keep the Fireworks spec's 422 `{"detail": [...]}`, with OpenAI's `error`
object beside it (api/core/errors.py)."""

from __future__ import annotations

import dataclasses

from litestar import Request, Response, post
from litestar.datastructures import State

from api.completions import body, fields, plan, render, serverless
from api.core.errors import FIREWORKS_ERRORS
from api.core.pipeline import Dialect, generate

COMPLETIONS = Dialect(parse=body.parse, models=body.MODELS, registry=fields.REGISTRY, plan=plan.plan_completion,
                      whole=render.whole, stream=render.completion_chunks, error_event=lambda error: error.body)


@post("/completions", status_code=200, exception_handlers=FIREWORKS_ERRORS.handlers())
async def create_completion(request: Request, state: State) -> Response:
    return await generate(COMPLETIONS, request, state.server)


# Friendli's serverless base URL is .../serverless/v1: its clients get its own answer shapes.
SERVERLESS = dataclasses.replace(COMPLETIONS, plan=serverless.plan_serverless, whole=serverless.whole,
                                 stream=serverless.events, done_marker=False)
SERVERLESS_PREFIX = "/serverless/v1"


@post("/completions", status_code=200, exception_handlers=FIREWORKS_ERRORS.handlers())
async def create_serverless_completion(request: Request, state: State) -> Response:
    return await generate(SERVERLESS, request, state.server)


HANDLERS = [create_completion]
SERVERLESS_HANDLERS = [create_serverless_completion]
