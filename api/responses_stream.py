"""A generated answer as a Responses API result: one Response object, or its event stream.

The stream, each event carrying `sequence_number` 0, 1, 2, ... (sent with an `event:` line
naming its type, api/sse.py):

    response.created, response.in_progress           the response, in_progress, no output
    response.output_item.added                        the assistant message, in_progress
    response.content_part.added                       its output_text part, empty
    response.output_text.delta ...                    the text as it comes
    response.output_text.done, response.content_part.done, response.output_item.done
    response.completed | response.incomplete          the final response, with usage

A response is stored before its last event is sent (or before it is returned). When
generation breaks off once the stream has begun, the stream ends with response.failed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from api.chat_response import obfuscation_padding
from api.errors import ApiError
from api.generation import ChoiceEvent, Generation, collect
from api.responses_object import (
    Json,
    ResponseIdentity,
    failure,
    logprob_entries,
    output_message,
    output_text_part,
    response_object,
    status_of,
    usage_object,
)
from api.responses_request import ResponsePlan
from api.responses_store import save_response
from api.state import ServerState

FINAL_EVENTS = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed"}


async def whole_response(server: ServerState, identity: ResponseIdentity, plan: ResponsePlan,
                         generation: Generation) -> Json:
    """The finished (and stored) response of a non-streamed request."""
    result = (await collect(generation))[0]
    status = status_of(result.finish_reason)
    if status == "failed":
        raise ApiError(500, "generation failed before the answer was complete", error_type="server_error")
    logprobs = logprob_entries(server.tokenizer, result.logprobs) if plan.logprobs else None
    output = [output_message(identity, status, [output_text_part(result.text, logprobs)])]
    response = response_object(identity, plan, status, output, usage_object(generation.usage))
    await save_response(server, plan, response)
    return response


class ResponseEventWriter:
    """The events of one streamed response, numbered in order."""

    def __init__(self, server: ServerState, identity: ResponseIdentity, plan: ResponsePlan) -> None:
        self.server = server
        self.identity = identity
        self.plan = plan
        self.sequence_number = 0
        self.text = ""
        self.logprobs: list[Json] | None = [] if plan.logprobs else None

    async def events(self, generation: Generation) -> AsyncIterator[Json]:
        """Every event of the stream. The opening events wait for the engine's first output,
        so a request refused before then raises (api/sse.py `prefetched` makes that an HTTP
        error); once the stream has begun, a failure ends it with response.failed."""
        started, finish = False, None
        async with aclosing(generation.events()) as events:
            try:
                async for event in events:
                    if not started:
                        started = True
                        for opening in self.opening_events():
                            yield opening
                    for delta in self.deltas(event):
                        yield delta
                    finish = event.finish_reason or finish
            except ApiError as error:
                if not started:
                    raise
                yield self.final_event("failed", generation, error=failure(str(error)))
                return
        status = status_of(finish)
        if status == "failed":  # the engine broke off: nothing to close or store
            yield self.final_event(status, generation)
            return
        for closing in self.closing_events(status):
            yield closing
        final = self.final_event(status, generation)
        await save_response(self.server, self.plan, final["response"])
        yield final

    def event(self, event_type: str, **fields: Any) -> Json:
        event = {"type": event_type, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def opening_events(self) -> list[Json]:
        empty = response_object(self.identity, self.plan, "in_progress", [])
        place = {"item_id": self.identity.message_id, "output_index": 0, "content_index": 0}
        return [
            self.event("response.created", response=empty),
            self.event("response.in_progress", response=empty),
            self.event("response.output_item.added", output_index=0,
                       item=output_message(self.identity, "in_progress", [])),
            self.event("response.content_part.added", **place,
                       part=output_text_part("", [] if self.logprobs is not None else None)),
        ]

    def deltas(self, event: ChoiceEvent) -> list[Json]:
        if not event.text and not (self.logprobs is not None and event.logprobs):
            return []
        logprobs = []
        if self.logprobs is not None:
            logprobs = logprob_entries(self.server.tokenizer, event.logprobs or [])
            self.logprobs += logprobs
        self.text += event.text
        delta = self.event("response.output_text.delta", item_id=self.identity.message_id, output_index=0,
                           content_index=0, delta=event.text, logprobs=logprobs)
        if self.plan.include_obfuscation:
            delta["obfuscation"] = obfuscation_padding()
        return [delta]

    def closing_events(self, status: str) -> list[Json]:
        place = {"item_id": self.identity.message_id, "output_index": 0, "content_index": 0}
        part = output_text_part(self.text, self.logprobs)
        return [
            self.event("response.output_text.done", **place, text=self.text, logprobs=self.logprobs or []),
            self.event("response.content_part.done", **place, part=part),
            self.event("response.output_item.done", output_index=0, item=self.output_item(status)),
        ]

    def output_item(self, status: str) -> Json:
        return output_message(self.identity, status, [output_text_part(self.text, self.logprobs)])

    def final_event(self, status: str, generation: Generation, error: Json | None = None) -> Json:
        if status == "failed" and error is None:
            error = failure()
        output = [self.output_item(status)] if status != "failed" else []
        response = response_object(self.identity, self.plan, status, output, usage_object(generation.usage), error)
        return self.event(FINAL_EVENTS[status], response=response)
