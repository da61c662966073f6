"""A generated reply as an Anthropic Message, whole or as its stream of events.

The stream is message_start (the message with empty content and no stop reason yet),
then each content block: content_block_start, one content_block_delta per piece of it
(text_delta, or input_json_delta for a tool call's input; a reply that thinks first has a
thinking block, api/messages/thinking.py), content_block_stop; then
message_delta (stop_reason, stop_sequence, usage) and message_stop. api/core/sse.py sends
each with an `event:` line naming its type. A generation that breaks off mid-stream ends
with an `error` event instead, as Anthropic's streams do. A reply that may call tools is
read into text and tool_use blocks by api/messages/tool_calls.py.

Usage follows Anthropic's split of the prompt: `cache_read_input_tokens` are the prompt
tokens the prefix cache already held, `input_tokens` the rest; nothing is ever written to
a cache on request, so `cache_creation_input_tokens` is 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

import pydantic
from litestar import Response

from api.core.errors import ApiError, generation_cut_off
from api.messages.errors import error_type
from api.core.generation import ChoiceEvent, ChoiceResult, Generation
from api.core.usage import Usage
from api.messages.plan import MessagesPlan
from api.messages.thinking import thinking_block
from api.messages.tool_calls import StreamBlocks, answer_blocks
from generated.flint import (
    AnthropicError,
    ContentBlockStopEvent,
    ErrorEvent,
    Message,
    MessageDelta,
    MessageDeltaEvent,
    MessageDeltaUsage,
    MessageStartEvent,
    MessageStopEvent,
    MessageUsage,
    StopReason,
)

STANDARD = "standard"  # Anthropic's word for the default tier (api/core/tenancy.py); "priority" is its own
BROKEN_OFF = "generation failed mid-way; the reply is incomplete"
# Engine finish reasons to Anthropic's (a stop string is reported apart: stop_sequence).
STOP_REASONS = {"stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS}


@dataclass(frozen=True)
class MessageIdentity:
    id: str  # msg_...
    model: str
    service_tier: str = STANDARD  # the tier that served it, in Anthropic's words

    @classmethod
    def of(cls, generation: Generation) -> MessageIdentity:
        return cls(id=f"msg_{generation.request_id}", model=generation.model_id,
                   service_tier="priority" if generation.tenancy.priority else STANDARD)


def stop_reason(finish_reason: str | None, stop: str | None, called: bool = False) -> StopReason | None:
    """Anthropic's stop reason: a reply that ends naturally after tool calls stops with tool_use."""
    if stop is not None:
        return StopReason.STOP_SEQUENCE
    if called and finish_reason == "stop":
        return StopReason.TOOL_USE
    return STOP_REASONS.get(finish_reason)


def message_usage(usage: Usage, service_tier: str = STANDARD) -> MessageUsage:
    return MessageUsage(input_tokens=usage.num_prompt_tokens - usage.num_cached_tokens,
                        output_tokens=usage.num_completion_tokens, cache_creation_input_tokens=0,
                        cache_read_input_tokens=usage.num_cached_tokens, service_tier=service_tier)


def message(identity: MessageIdentity, result: ChoiceResult, usage: Usage, plan: MessagesPlan | None = None
            ) -> Message:
    """The whole reply; a generation that broke off is a 503 (a Message cannot say so)."""
    if result.finish_reason == "error":
        raise generation_cut_off()
    blocks, called = answer_blocks(result.text, plan.tool_format if plan is not None else None)
    if result.reasoning_text and plan is not None:
        blocks = [thinking_block(plan.signing_key, result.reasoning_text), *blocks]
    return Message(id=identity.id, type="message", role="assistant", model=identity.model, content=blocks,
                   stop_reason=stop_reason(result.finish_reason, result.stop_string, called),
                   stop_sequence=result.stop_string, usage=message_usage(usage, identity.service_tier))


def error_event(error: ApiError) -> ErrorEvent:
    """A failure once the stream has begun, as Anthropic's streams tell it."""
    return ErrorEvent(type="error", error=AnthropicError(type=error_type(error.status_code), message=error.message))


async def whole(plan: MessagesPlan, generation: Generation, results: list[ChoiceResult]) -> Response:
    [result] = results
    reply = message(MessageIdentity.of(generation), result, generation.usage, plan)
    return Response(reply.model_dump(mode="json", exclude_unset=True))


async def stream(plan: MessagesPlan, generation: Generation) -> AsyncIterator[pydantic.BaseModel]:
    """The reply's stream events. The first awaits the first engine output, so that a request
    refused before any output is an HTTP error rather than a broken stream (api/core/sse.py
    `prefetched`), and message_start can report the prompt's token counts."""
    identity = MessageIdentity.of(generation)
    blocks = StreamBlocks(plan.tool_format, plan.signing_key if plan.reasoning.reasons else None)
    async with aclosing(generation.events()) as events:
        started = False
        async for event in events:
            if not started:
                started = True
                yield message_start(identity, generation.usage)
                for opening in blocks.start():
                    yield opening
            for block_event in blocks.think(event.reasoning_text) if event.reasoning_text else []:
                yield block_event
            for block_event in blocks.feed(event.text, final=event.finish_reason is not None):
                yield block_event
            if event.finish_reason is not None:
                for closing in closing_events(event, generation.usage, blocks):
                    yield closing
                return


def message_start(identity: MessageIdentity, usage: Usage) -> MessageStartEvent:
    started = Message(id=identity.id, type="message", role="assistant", model=identity.model, content=[],
                      stop_reason=None, stop_sequence=None,
                      usage=message_usage(usage, identity.service_tier).model_copy(update={"output_tokens": 0}))
    return MessageStartEvent(type="message_start", message=started)


def closing_events(last: ChoiceEvent, usage: Usage, blocks: StreamBlocks | None = None) -> list[pydantic.BaseModel]:
    """What follows the last text: the last block's end, the stop reason and counts, the end
    (`blocks`: the reply's; None: one text block, at index 0)."""
    if last.finish_reason == "error":
        return [ErrorEvent(type="error", error=AnthropicError(type="api_error", message=BROKEN_OFF))]
    counts = message_usage(usage)
    stops = blocks.finish() if blocks is not None else [ContentBlockStopEvent(type="content_block_stop", index=0)]
    called = blocks is not None and blocks.called
    return [
        *stops,
        MessageDeltaEvent(type="message_delta",
                          delta=MessageDelta(stop_reason=stop_reason(last.finish_reason, last.stop_string, called),
                                             stop_sequence=last.stop_string),
                          usage=MessageDeltaUsage(output_tokens=counts.output_tokens,
                                                  input_tokens=counts.input_tokens,
                                                  cache_creation_input_tokens=0,
                                                  cache_read_input_tokens=counts.cache_read_input_tokens)),
        MessageStopEvent(type="message_stop"),
    ]
