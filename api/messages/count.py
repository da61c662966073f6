"""POST /v1/messages/count_tokens: the prompt token count of a message request, as Anthropic's
API answers it (`{"input_tokens": N}`), without generating.

The body is parsed and its fields checked against the same registry as a message's
(api/messages/fields.py), and N comes from the same function that makes a message's prompt
(`plan.prompt_ids`), so it is exactly the prompt length POST /v1/messages would use for the
same conversation: whatever that prompt comes to hold, the count holds too. A conversation
whose prompt /v1/messages would refuse (a template refusal, a prompt over the context
window) is refused here with the same 400.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request

from api.core.state import ServerState
from api.core.validation import read_json_body
from api.messages import body as bodies
from api.messages.fields import REGISTRY
from api.messages.plan import prompt_ids
from generated.flint import CountMessageTokensRequest, MessageTokensCount


def parse(raw: Any) -> CountMessageTokensRequest:
    """The body, every given field checked against the registry (in a worker thread)."""
    body = bodies.parse_count(raw)
    REGISTRY.refuse_within(body, models=bodies.COUNT_MODELS)
    return body


async def count_tokens(raw: Any, server: ServerState) -> MessageTokensCount:
    """The count of a decoded body: parsed and checked, its model the served one."""
    body = await asyncio.to_thread(parse, raw)
    server.require_model(body.model)
    return MessageTokensCount(input_tokens=len(await prompt_ids(body, server)))


async def answer(request: Request, server: ServerState) -> dict[str, Any]:
    """The route's answer to `request`: its body's count, as JSON."""
    counted = await count_tokens(await read_json_body(request), server)
    return counted.model_dump(mode="json")
