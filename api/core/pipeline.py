"""The one generation path of the four POST routes: parse, plan, admit, run, render.

Each dialect (api/completions, api/chat, api/responses, api/messages) describes itself with
a `Dialect`: how its body is parsed (schema and registry refusals), how a body becomes a
plan (the engine requests of its choices, and what the answer needs besides their output),
and how the answer is written, whole or as a stream of events. Before planning, the
request's tenancy (api/core/tenancy.py: its service tier, prefix-cache isolation and
session) is read from the body, the headers and the API key; admission counts it by tier,
and every engine request of the generation carries it. `generate` runs them in that
fixed order, so admission always counts planned choices and every route answers a client
that went away the same way: its generation is aborted within one engine step, whether it
streams or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from litestar import Request, Response

from api.core.admission import admit
from api.core.errors import ApiError, ClientDisconnected
from api.core.generation import ChoiceRequest, ChoiceResult, Generation, collect
from api.core.registry import Registry
from api.core.sse import prefetched, sse_response
from api.core.state import ServerState
from api.core.tenancy import Ask, openai_ask, tenancy_of
from api.core.validation import read_json_body
from api.server.auth import presented_key
from api.server.request_id import engine_request_id


class Plan(Protocol):
    """What every dialect's plan tells the generation path."""

    choices: list[ChoiceRequest]
    stream: bool

    @property
    def timeout(self) -> float | None:
        """Seconds the request may wait for its first output (None: no bound)."""


@dataclass(frozen=True)
class Dialect:
    """One API dialect's generation route, stage by stage."""

    parse: Callable[[Any], Any]  # decoded JSON -> the body (a schema violation raises)
    models: tuple[type, ...]  # the request models the body stands for, whose tables decide its fields
    registry: Registry  # the dialect's field registry (api/<dialect>/fields.py)
    plan: Callable[[Any, ServerState], Awaitable[Plan]]  # body -> plan (model checked already)
    whole: Callable[[Plan, Generation, list[ChoiceResult]], Awaitable[Response]]
    stream: Callable[[Plan, Generation], AsyncIterator[Any]]  # the events, first awaited before sending
    # The event that tells a failure once the stream has begun (None: the events tell it themselves).
    error_event: Callable[[ApiError], Any] | None = None
    named_events: bool = False  # SSE events carry an `event:` line (Responses, Messages)
    done_marker: bool = True  # an unnamed stream ends with `data: [DONE]` (not Friendli's serverless one)
    # What the body asks of tenancy: tier, isolation key, session (api/core/tenancy.py).
    ask: Callable[[Any], Ask] = openai_ask


async def generate(dialect: Dialect, request: Request, server: ServerState) -> Response:
    """Serve one generation request of `dialect`."""
    raw = server.with_served_model(await read_json_body(request))
    body = await asyncio.to_thread(parse, dialect, raw)
    adapter = server.require_model(body.model)
    tenancy = tenancy_of(dialect.ask(body), server.settings, presented_key(request), request.headers)
    plan = await dialect.plan(body, server)
    admit(server, len(plan.choices), tenancy.priority)
    # Named by the request's X-Request-Id where Flint made it (a client's own may not be unique).
    generation = Generation(server, plan.choices, request_id=engine_request_id(request), timeout=plan.timeout,
                            adapter=adapter, tenancy=tenancy)
    try:
        if plan.stream:
            events = await until_disconnected(request, prefetched(dialect.stream(plan, generation)))
            return sse_response(events, named=dialect.named_events, error_event=dialect.error_event,
                                done=dialect.done_marker)
        results = await until_disconnected(request, collect(generation))
        return await dialect.whole(plan, generation, results)
    except BaseException:
        generation.release()  # the events release as they end; this covers every other way out
        raise


def parse(dialect: Dialect, raw: Any) -> Any:
    """The body, every given field checked against the registry (in a worker thread: a
    large body takes a while to validate and walk)."""
    body = dialect.parse(raw)
    dialect.registry.refuse_within(body, models=dialect.models)
    return body


async def until_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """`work`'s result, unless the client disconnects first: then `work` is cancelled (a
    generation aborts its engine requests) and ClientDisconnected is raised, whose answer
    nobody reads."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled() or not task.done():
        raise ClientDisconnected()
    return task.result()


async def wait_for_disconnect(request: Request) -> None:
    """Returns once the ASGI server reports the client gone. The body has been read, so the
    server's next message is the disconnect (uvicorn sends it when the socket closes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
