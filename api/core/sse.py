"""Server-sent events: one `data: <json>` event per item, `data: [DONE]` last.

The framing OpenAI-compatible clients parse: each event is `data: ` + one line of JSON +
a blank line. Pydantic models are written with `exclude_unset`, so a producer chooses
which null fields a chunk carries by setting them.

Named streams (Anthropic Messages, OpenAI Responses) put an `event: <type>` line before
each `data:` line, the name being the event's own `type`, and end with their own last
event rather than `[DONE]`."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pydantic
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from api.core.errors import ApiError

log = logging.getLogger("flint")

SSE_MEDIA_TYPE = "text/event-stream"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE_EVENT = b"data: [DONE]\n\n"


def encode_event(event: pydantic.BaseModel | Mapping[str, Any], *, named: bool = False) -> bytes:
    """One SSE event carrying `event` as compact JSON; `named`: after an `event: <type>` line."""
    if isinstance(event, pydantic.BaseModel):
        # serialize_as_any: a dialect's subclass of a spec model writes its own fields too
        # (chat's reasoning_content, api/chat/reasoning.py).
        payload = event.model_dump_json(by_alias=True, exclude_unset=True, serialize_as_any=True)
        event_type = getattr(event, "type", None)
    else:
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        event_type = event.get("type")
    name = b"event: " + str(event_type).encode("utf-8") + b"\n" if named else b""
    return name + b"data: " + payload.encode("utf-8") + b"\n\n"


async def sse_frames(events: AsyncIterator[pydantic.BaseModel | Mapping[str, Any]], *, named: bool = False,
                     error_event: Callable[[ApiError], Any] | None = None,
                     done: bool = True) -> AsyncIterator[bytes]:
    """The SSE byte frames of `events`, then the [DONE] terminator (unless `named`, or not
    `done`: Friendli's serverless stream ends with its own `complete` event).

    The status line has been sent by now, so a failure can only be told in the stream: an
    ApiError, or any unexpected exception (logged with its traceback), becomes the
    dialect's `error_event`, and the stream ends as it would have."""
    try:
        async for event in events:
            yield encode_event(event, named=named)
    except Exception as error:
        if error_event is None:
            raise
        if not isinstance(error, ApiError):
            log.error("unexpected error in a stream", exc_info=error)
            error = ApiError(500, "The server had an internal error while streaming.", error_type="server_error")
        yield encode_event(error_event(error), named=named)
    if done and not named:
        yield DONE_EVENT


class Prefetched:
    """An event iterator whose first event has been awaited already (see `prefetched`);
    closing it closes the iterator it reads, whether or not iteration ever began."""

    def __init__(self, events: AsyncIterator[Any], ready: list[Any]) -> None:
        self.events = events
        self.ready = ready

    def __aiter__(self) -> Prefetched:
        return self

    async def __anext__(self) -> Any:
        if self.ready:
            return self.ready.pop(0)
        return await anext(self.events)

    async def aclose(self) -> None:
        await self.events.aclose()


async def prefetched(events: AsyncIterator[Any]) -> Prefetched:
    """`events` with its first item already awaited, so that an error raised before the
    first event (a refused or timed-out request) becomes an HTTP error status rather than
    a broken stream."""
    try:
        first = await anext(events)
    except StopAsyncIteration:
        return Prefetched(events, [])
    except BaseException:
        await events.aclose()
        raise
    return Prefetched(events, [first])


def sse_response(events: Prefetched, headers: Mapping[str, str] | None = None, *, named: bool = False,
                 error_event: Callable[[ApiError], Any] | None = None, done: bool = True) -> Stream:
    """A streaming response of `events` (`named`, `error_event`, `done`: see `sse_frames`).

    Litestar cancels the sending task when the client disconnects; closing the event
    iterator afterwards (a background task runs however the body ended, even if it never
    began) makes sure its `finally` blocks run at once, so the engine requests behind it
    are aborted."""
    frames = sse_frames(events, named=named, error_event=error_event, done=done)

    async def close() -> None:
        await frames.aclose()
        await events.aclose()

    return Stream(frames, media_type=SSE_MEDIA_TYPE, headers={**SSE_HEADERS, **(headers or {})},
                  background=BackgroundTask(close))
