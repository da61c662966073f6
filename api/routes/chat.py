"""POST /v1/chat/completions: a conversation in, the assistant's reply out (whole or streamed)."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.datastructures import State

from api.admission import admit
from api.chat_body import parse_chat_request
from api.chat_request import plan_chat
from api.chat_response import ResponseIdentity, chat_completion
from api.chat_store import chat_chunks, save_completion
from api.generation import Generation, collect
from api.sse import prefetched, sse_response
from api.state import ServerState
from api.validation import read_json_body


@post("/chat/completions", status_code=200)
async def create_chat_completion(request: Request, state: State) -> Response:
    server: ServerState = state.server
    raw = await read_json_body(request)
    body = parse_chat_request(raw)
    server.require_model(body.model)
    plan = plan_chat(server, body)
    admit(server)
    generation = Generation(server, plan.choices)
    identity = ResponseIdentity(id=f"chatcmpl-{generation.request_id}", model=server.model.id)
    if plan.stream:
        return sse_response(await prefetched(chat_chunks(server, raw, body, identity, plan, generation)))
    results = await collect(generation)
    completion = chat_completion(identity, plan, server.tokenizer, results, generation.usage)
    if body.store:
        await save_completion(server, raw, body, completion)
    return Response(completion.model_dump(mode="json", exclude_unset=True))
