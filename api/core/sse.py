"""Server-sent events: one `data: <json>` event per item, `data: [DONE]` last.

The framing OpenAI-compatible clients parse: each event is `data: ` + one line of JSON +
a blank line. Pydantic models are written with `exclude_unset`, so a producer chooses
which null fields a chunk carries by setting them.

Named streams (Anthropic Messages, OpenAI Responses) put an `event: <type>` line before
each `data:` line, the name being the event's own `type`, and end with their own last
event rather than `[DONE]`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pydantic
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

SSE_MEDIA_TYPE = "text/event-stream"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE_EVENT = b"data: [DONE]\n\n"


def encode_event(event: pydantic.BaseModel | Mapping[str, Any], *, named: bool = False) -> bytes:
    """One SSE event carrying `event` as compact JSON; `named`: after an `event: <type>` line."""
    if isinstance(event, pydantic.BaseModel):
        payload = event.model_dump_json(by_alias=True, exclude_unset=True)
        event_type = getattr(event, "type", None)
    else:
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        event_type = event.get("type")
    name = b"event: " + str(event_type).encode("utf-8") + b"\n" if named else b""
    return name + b"data: " + payload.encode("utf-8") + b"\n\n"


async def sse_frames(events: AsyncIterator[pydantic.BaseModel | Mapping[str, Any]], *,
                     named: bool = False) -> AsyncIterator[bytes]:
    """The SSE byte frames of `events`, then the [DONE] terminator (unless `named`)."""
    async for event in events:
        yield encode_event(event, named=named)
    if not named:
        yield DONE_EVENT


async def prefetched(events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """`events` with its first item already awaited, so that an error raised before the
    first event (a refused or timed-out request) becomes an HTTP error status rather than
    a broken stream; the returned iterator closes `events` when it is closed."""
    try:
        first = await anext(events)
    except StopAsyncIteration:
        return _closing(events, [])
    except BaseException:
        await events.aclose()
        raise
    return _closing(events, [first])


async def _closing(events: AsyncIterator[Any], ready: list[Any]) -> AsyncIterator[Any]:
    try:
        for event in ready:
            yield event
        async for event in events:
            yield event
    finally:
        await events.aclose()


def sse_response(events: AsyncIterator[pydantic.BaseModel | Mapping[str, Any]],
                 headers: Mapping[str, str] | None = None, *, named: bool = False) -> Stream:
    """A streaming response of `events` (`named`: see the module docstring).

    Litestar cancels the sending task when the client disconnects; closing the event
    iterator afterwards (a background task runs however the body ended) makes sure its
    `finally` blocks run at once, so the engine requests behind it are aborted."""
    frames = sse_frames(events, named=named)

    async def close() -> None:
        await frames.aclose()
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()

    return Stream(frames, media_type=SSE_MEDIA_TYPE, headers={**SSE_HEADERS, **(headers or {})},
                  background=BackgroundTask(close))
