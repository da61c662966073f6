"""A generated answer as a Responses API result: one Response object, or its event stream.

Objects are built as JSON dicts and checked against the generated `Response` model, so a
stored response, a streamed event's response and a returned one are the same data.
Status: `completed` when the model ended its answer; `incomplete`, with
`incomplete_details.reason` `max_output_tokens`, when the token limit (or the end of the
context window) cut it; `failed`, with `error`, when generation broke off. An answer that
may call tools has its calls as `function_call` items after the message
(api/responses/tool_calls.py).

The stream, each event carrying `sequence_number` 0, 1, 2, ... (sent with an `event:` line
naming its type, api/core/sse.py):

    response.created, response.in_progress           the response, in_progress, no output
    (a model that thinks: its reasoning item's events, api/responses/reasoning.py)
    response.output_item.added                        the assistant message, in_progress
    response.content_part.added                       its output_text part, empty
    response.output_text.delta ...                    the text as it comes
    response.output_text.done, response.content_part.done, response.output_item.done
    (with tools or reasoning: the message opens at the first text; tools: then each call's events)
    response.completed | response.incomplete          the final response, with usage

A response is stored before its last event is sent (or before it is returned). When
generation breaks off once the stream has begun, the stream ends with response.failed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from litestar import Response

from api.core.errors import ApiError, generation_cut_off
from api.core.generation import ChoiceEvent, ChoiceResult, Generation
from api.core.openai import choice_logprobs, obfuscation_padding
from api.core.state import ServerState
from api.core.usage import Usage
from api.responses.input import new_id
from api.responses.plan import ResponsePlan
from api.responses.reasoning import ReasoningEvents, answer_logprobs, reasoning_item
from api.responses.store import save_response
from api.responses.tool_calls import CallEvents, answer_items
from engine.host.request import TokenLogprob
from engine.text.tokenizer import Tokenizer
from generated.flint import Response as ResponseObject

log = logging.getLogger("flint")
Json = dict[str, Any]
STATUS_BY_FINISH = {"stop": "completed", "length": "incomplete"}


@dataclass(frozen=True)
class ResponseIdentity:
    """What every object of one response shares: its id, its output message's id, when."""

    model: str
    id: str = field(default_factory=lambda: f"resp_{uuid.uuid4().hex}")
    message_id: str = field(default_factory=lambda: new_id("msg"))
    reasoning_id: str = field(default_factory=lambda: new_id("rs"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    service_tier: str = "default"  # the tier that served it (api/core/tenancy.py)

    @classmethod
    def of(cls, generation: Generation) -> ResponseIdentity:
        return cls(model=generation.model_id, id=f"resp_{generation.request_id}", service_tier=generation.tenancy.tier)


def status_of(finish_reason: str | None) -> str:
    return STATUS_BY_FINISH.get(finish_reason, "failed")


def response_object(identity: ResponseIdentity, plan: ResponsePlan, status: str,
                    output: list[Json], usage: Json | None = None, error: Json | None = None) -> Json:
    """The Response as JSON, echoing the settings it was made with."""
    response = {
        "id": identity.id, "object": "response", "created_at": identity.created_at, "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": identity.model, "output": output, "usage": usage, **settings_of(plan),
        "service_tier": identity.service_tier,
    }
    ResponseObject.model_validate(response)  # the spec's shape, checked where it is made
    return response


def settings_of(plan: ResponsePlan) -> Json:
    """The request's settings as a Response reports them: the values in effect."""
    request, sampling = plan.request, plan.choice.sampling
    return {
        "instructions": request.instructions, "previous_response_id": request.previous_response_id,
        "temperature": sampling.temperature, "top_p": sampling.top_p, "top_logprobs": request.top_logprobs,
        "max_output_tokens": request.max_output_tokens, "metadata": plan.body.get("metadata") or {},
        "store": request.store is not False, "background": False,
        "text": {"format": text_format(request), "verbosity": "medium"},
        "reasoning": {"effort": (plan.body.get("reasoning") or {}).get("effort"), "summary": None},
        "tool_choice": plan.body.get("tool_choice") or "auto",
        "tools": [tool.model_dump(mode="json") for tool in request.tools or []],
        "parallel_tool_calls": request.parallel_tool_calls is not False, "max_tool_calls": request.max_tool_calls,
        "truncation": "disabled", "user": request.user,
        "safety_identifier": request.safety_identifier, "prompt_cache_key": request.prompt_cache_key,
    }


def text_format(request) -> Json:
    """`text.format` as in effect: the one given (its defaults filled in), else text."""
    given = request.text.format if request.text else None
    return given.model_dump(mode="json", by_alias=True, exclude_none=True) if given else {"type": "text"}


def output_message(identity: ResponseIdentity, status: str, parts: list[Json]) -> Json:
    """The assistant message item of the output (`in_progress` while streaming)."""
    item_status = status if status in ("in_progress", "incomplete") else "completed"
    return {"id": identity.message_id, "type": "message", "role": "assistant", "status": item_status,
            "content": parts}


def output_text_part(text: str, logprobs: list[Json] | None) -> Json:
    part = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def logprob_entries(tokenizer: Tokenizer, logprobs: Sequence[TokenLogprob]) -> list[Json]:
    """Each token's logprob with its top alternatives: the chat completion entries, which
    have the same shape (token, logprob, bytes, top_logprobs)."""
    return [entry.model_dump(mode="json") for entry in choice_logprobs(tokenizer, logprobs).content]


def usage_object(usage: Usage) -> Json:
    return {
        "input_tokens": usage.num_prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.num_cached_tokens},
        "output_tokens": usage.num_completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.num_reasoning_tokens},
        "total_tokens": usage.num_prompt_tokens + usage.num_completion_tokens,
    }


def failed_message(error: Exception) -> str:
    """What response.failed says of `error` (an unexpected one is logged, not shown)."""
    if isinstance(error, ApiError):
        return error.message
    log.error("unexpected error in a response stream", exc_info=error)
    return "The server had an internal error while streaming."


def failure(message: str = "generation failed before the answer was complete") -> Json:
    return {"code": "server_error", "message": message}


FINAL_EVENTS = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed"}


async def whole(plan: ResponsePlan, generation: Generation, results: list[ChoiceResult]) -> Response:
    """The finished (and stored) response of a non-streamed request."""
    [result], server = results, generation.server
    status = status_of(result.finish_reason)
    if status == "failed":
        raise generation_cut_off()
    answer = answer_logprobs(result.logprobs, result.num_reasoning_tokens)
    logprobs = logprob_entries(server.tokenizer, answer) if plan.logprobs else None
    identity = ResponseIdentity.of(generation)
    message = lambda text, item_status: output_message(identity, item_status, [output_text_part(text, logprobs)])
    output = [message(result.text, status)] if plan.tools is None else \
        answer_items(result.text, plan.tool_format, status, message)
    if result.reasoning_text:
        output.insert(0, reasoning_item(identity.reasoning_id, result.reasoning_text, "completed"))
    response = response_object(identity, plan, status, output, usage_object(generation.usage))
    await keep(server, plan, response)
    return Response(response)


async def keep(server: ServerState, plan: ResponsePlan, response: Json) -> None:
    """Store `response` unless its request said `store: false`."""
    if plan.request.store is not False:
        await save_response(server, response, plan.body, plan.history, plan.input_items)


def stream(plan: ResponsePlan, generation: Generation) -> AsyncIterator[Json]:
    """The events of a streamed response."""
    return ResponseEventWriter(generation.server, ResponseIdentity.of(generation), plan).events(generation)


class ResponseEventWriter:
    """The events of one streamed response, numbered in order."""

    def __init__(self, server: ServerState, identity: ResponseIdentity, plan: ResponsePlan) -> None:
        self.server = server
        self.identity = identity
        self.plan = plan
        self.sequence_number = 0
        self.text = ""
        self.logprobs: list[Json] | None = [] if plan.logprobs else None
        self.items: list[Json] = []  # the output items closed so far
        self.message_open = False
        self.include_obfuscation = plan.include_obfuscation
        self.calls = CallEvents(self, plan.tool_format) if plan.tools is not None else None
        self.reasoning = ReasoningEvents(self, identity.reasoning_id)
        self.num_reasoning_tokens = 0  # of the events so far

    async def events(self, generation: Generation) -> AsyncIterator[Json]:
        """Every event of the stream. The opening events wait for the engine's first output,
        so a request refused before then raises (api/core/sse.py `prefetched` makes that an
        HTTP error); once the stream has begun, a failure ends it with response.failed."""
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
            except Exception as error:
                if not started:
                    raise
                yield self.final_event("failed", generation, error=failure(failed_message(error)))
                return
        status = status_of(finish)
        if status == "failed":  # the engine broke off: nothing to close or store
            yield self.final_event(status, generation)
            return
        for closing in self.closing_events(status):
            yield closing
        response = self.final_response(status, generation)
        try:
            await keep(self.server, self.plan, response)
        except Exception as error:  # the store failed: the response was not kept
            yield self.final_event("failed", generation, error=failure(failed_message(error)))
            return
        yield self.event(FINAL_EVENTS[status], response=response)

    def event(self, event_type: str, **fields: Any) -> Json:
        event = {"type": event_type, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def opening_events(self) -> list[Json]:
        """The response's opening; the message opens with it unless the answer may hold calls
        or follow a reasoning item (then it opens at the first text)."""
        empty = response_object(self.identity, self.plan, "in_progress", [])
        opening = [self.event("response.created", response=empty), self.event("response.in_progress", response=empty)]
        return opening if self.calls is not None or self.plan.reasoning.reasons else opening + self.open_message()

    def place(self) -> Json:
        return {"item_id": self.identity.message_id, "output_index": len(self.items), "content_index": 0}

    def open_message(self) -> list[Json]:
        self.message_open = True
        place = self.place()
        return [
            self.event("response.output_item.added", output_index=place["output_index"],
                       item=output_message(self.identity, "in_progress", [])),
            self.event("response.content_part.added", **place,
                       part=output_text_part("", [] if self.logprobs is not None else None)),
        ]

    def deltas(self, event: ChoiceEvent) -> list[Json]:
        """The thinking's events, then the answer's: its start closes the reasoning item."""
        events = self.reasoning.feed(event.reasoning_text) if event.reasoning_text else []
        answer = answer_logprobs(event.logprobs or [], event.num_reasoning_tokens - self.num_reasoning_tokens)
        self.num_reasoning_tokens = event.num_reasoning_tokens
        if self.calls is not None:
            closed = self.reasoning.close() if event.text else []  # the answer has begun
            return events + closed + self.calls.feed(event.text, final=event.finish_reason is not None)
        if not event.text and not (self.logprobs is not None and answer):
            return events
        logprobs = []
        if self.logprobs is not None:
            logprobs = logprob_entries(self.server.tokenizer, answer)
            self.logprobs += logprobs
        opening = [] if self.message_open else self.reasoning.close() + self.open_message()
        return events + opening + [self.text_delta(event.text, logprobs)]

    def text_delta(self, text: str, logprobs: list[Json]) -> Json:
        self.text += text
        delta = self.event("response.output_text.delta", **self.place(), delta=text, logprobs=logprobs)
        if self.include_obfuscation:
            delta["obfuscation"] = obfuscation_padding()
        return delta

    def closing_events(self, status: str) -> list[Json]:
        thinking = self.reasoning.close()
        if self.calls is not None:
            return thinking + self.calls.close(status)
        return thinking + ([] if self.message_open else self.open_message()) + self.close_message(status)

    def close_message(self, status: str) -> list[Json]:
        place = self.place()
        part = output_text_part(self.text, self.logprobs)
        item = output_message(self.identity, status, [part])
        self.items.append(item)
        self.message_open = False
        return [
            self.event("response.output_text.done", **place, text=self.text, logprobs=self.logprobs or []),
            self.event("response.content_part.done", **place, part=part),
            self.event("response.output_item.done", output_index=place["output_index"], item=item),
        ]

    def final_response(self, status: str, generation: Generation, error: Json | None = None) -> Json:
        if status == "failed" and error is None:
            error = failure()
        output = self.items if status != "failed" else []
        return response_object(self.identity, self.plan, status, output, usage_object(generation.usage), error)

    def final_event(self, status: str, generation: Generation, error: Json | None = None) -> Json:
        return self.event(FINAL_EVENTS[status], response=self.final_response(status, generation, error))
