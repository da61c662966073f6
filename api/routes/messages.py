"""POST /v1/messages: Anthropic's Messages API, whole or streamed, with Anthropic-shaped errors."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.datastructures import State

from api.admission import admit
from api.anthropic_errors import ANTHROPIC_EXCEPTION_HANDLERS
from api.generation import Generation, collect
from api.messages_request import parse_messages_request, plan_messages
from api.messages_response import MessageIdentity, message, message_events
from api.sse import prefetched, sse_response
from api.state import ServerState
from api.validation import read_json_body


@post("/messages", status_code=200, exception_handlers=ANTHROPIC_EXCEPTION_HANDLERS)
async def create_message(request: Request, state: State) -> Response:
    server: ServerState = state.server
    body = parse_messages_request(await read_json_body(request))
    server.require_model(body.model)
    plan = plan_messages(server, body)
    admit(server)
    generation = Generation(server, [plan.choice])
    identity = MessageIdentity(id=f"msg_{generation.request_id}", model=server.model.id)
    if plan.stream:
        return sse_response(await prefetched(message_events(identity, generation)), named=True)
    [result] = await collect(generation)
    return Response(message(identity, result, generation.usage).model_dump(mode="json", exclude_unset=True))
