"""POST /v1/completions: text completions in the Fireworks and Friendli dialects."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.datastructures import State

from api.completions_body import parse_completions_body
from api.completions_request import plan_completion
from api.completions_response import CompletionContext, completion_body, perf_headers
from api.completions_stream import completion_chunks
from api.admission import admit
from api.generation import Generation, collect
from api.sse import prefetched, sse_response
from api.state import ServerState
from api.validation import read_json_body


@post("/completions", status_code=200)
async def create_completion(request: Request, state: State) -> Response:
    server: ServerState = state.server
    body = parse_completions_body(await read_json_body(request))
    admit(server)
    plan = plan_completion(body, server)
    generation = Generation(server, plan.choices, timeout=plan.timeout)
    generation.check()
    context = CompletionContext(plan, generation, server.tokenizer, server.model.id)
    if plan.stream:
        return sse_response(await prefetched(completion_chunks(context)))
    results = await collect(generation)
    return Response(completion_body(context, results), headers=perf_headers(generation))
