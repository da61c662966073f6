"""Generated choices to OpenAI chat completion objects: the whole answer, or stream chunks.

A stream gives each choice a first chunk with the assistant role, then content deltas
(and tool-call deltas, api/chat/tool_calls.py; a model's thinking comes first, as
`reasoning_content` deltas, api/chat/reasoning.py), then a chunk with its finish_reason;
with `stream_options.include_usage` every chunk carries `usage: null` and one last chunk
with no choices carries the totals (with vLLM's `continuous_usage_stats`, every chunk the
counts so far). With `store: true` the answer is stored before it is
returned, or once the stream's last chunk is sent (api/chat/store.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from litestar import Response

from api.chat.plan import ChatPlan
from api.chat.reasoning import reasoning_delta, with_reasoning
from api.chat.store import save_completion, stored_at_end
from api.chat.tool_calls import ToolDeltas, answer_message
from api.core.errors import generation_cut_off
from api.core.generation import ChoiceEvent, ChoiceResult, Generation, Results
from api.core.openai import choice_logprobs, obfuscation_padding
from api.core.usage import Usage
from engine.text.tokenizer import Tokenizer
from generated.openai_chat_completions import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChoiceLogprobs,
    ChatCompletionChunk,
    ChatCompletionChunkChoice,
    ChatCompletionChunkDelta,
    CompletionTokensDetails,
    CompletionUsage,
    PromptTokensDetails,
)


@dataclass(frozen=True)
class ChatIdentity:
    """What every object of one answer shares."""

    id: str
    model: str
    service_tier: str = "default"  # the tier that served it (api/core/tenancy.py)
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def of(cls, generation: Generation) -> ChatIdentity:
        return cls(id=f"chatcmpl-{generation.request_id}", model=generation.model_id,
                   service_tier=generation.tenancy.tier)


def usage_of(usage: Usage) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=usage.num_prompt_tokens, completion_tokens=usage.num_completion_tokens,
        total_tokens=usage.num_prompt_tokens + usage.num_completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.num_cached_tokens),
        # Drafts are predicted outputs or n-gram guesses (api/core/prediction.py): kept or not.
        completion_tokens_details=CompletionTokensDetails(
            reasoning_tokens=usage.num_reasoning_tokens, accepted_prediction_tokens=usage.num_accepted_draft_tokens,
            rejected_prediction_tokens=usage.num_rejected_draft_tokens),
    )


def finish_reason(reason: str | None) -> str:
    """The chat finish reason; a generation that broke off has none in the chat schema, so
    it is an error (a 503 answer, or an error event ending the stream)."""
    if reason in ("stop", "length"):
        return reason
    raise generation_cut_off()


def chat_completion(identity: ChatIdentity, plan: ChatPlan, tokenizer: Tokenizer, results: list[ChoiceResult],
                    usage: Usage) -> ChatCompletion:
    choices = [answer_choice(plan, tokenizer, result) for result in results]
    return ChatCompletion(id=identity.id, object="chat.completion", created=identity.created,
                          model=identity.model, choices=choices, usage=usage_of(usage),
                          service_tier=identity.service_tier)


def answer_choice(plan: ChatPlan, tokenizer: Tokenizer, result: ChoiceResult) -> ChatCompletionChoice:
    message, reason = answer_message(plan, result.text, finish_reason(result.finish_reason))
    if plan.reasoning.reasons:
        message = with_reasoning(message, result.reasoning_text)
    return ChatCompletionChoice(index=result.index, message=message, finish_reason=reason,
                                logprobs=choice_logprobs(tokenizer, result.logprobs) if plan.logprobs else None)


async def whole(plan: ChatPlan, generation: Generation, results: list[ChoiceResult]) -> Response:
    """The non-streamed answer (stored first when asked)."""
    completion = chat_completion(ChatIdentity.of(generation), plan, generation.server.tokenizer, results,
                                 generation.usage)
    if plan.body.store:
        await save_completion(generation.server, plan.raw, completion)
    return Response(completion.model_dump(mode="json", exclude_unset=True, serialize_as_any=True))


def stream(plan: ChatPlan, generation: Generation) -> AsyncIterator[ChatCompletionChunk]:
    """The chunks of a streamed answer; with `store: true`, stored once the last is sent."""
    identity = ChatIdentity.of(generation)
    writer = ChunkWriter(identity, plan, generation.server.tokenizer)
    if not plan.body.store:
        return writer.chunks(generation.events(), generation.usage)
    results = Results(plan.choices)
    chunks = writer.chunks(recorded(generation.events(), results), generation.usage)
    completion = lambda: chat_completion(identity, plan, writer.tokenizer, results.ordered(), generation.usage)
    return stored_at_end(generation.server, plan.raw, chunks, completion)


async def recorded(events: AsyncIterator[ChoiceEvent], results: Results) -> AsyncIterator[ChoiceEvent]:
    """`events`, each also added to `results`."""
    async with aclosing(events):
        async for event in events:
            results.add(event)
            yield event


class ChunkWriter:
    """Chunks of one streamed answer, in the order the module docstring gives."""

    def __init__(self, identity: ChatIdentity, plan: ChatPlan, tokenizer: Tokenizer) -> None:
        self.identity = identity
        self.plan = plan
        self.tokenizer = tokenizer
        self.usage = Usage()  # the request's, once `chunks` runs
        # Each choice's text read as tool calls, when the answer may hold them.
        self.tool_deltas = {choice.index: ToolDeltas(plan) for choice in plan.choices} if plan.tools else {}

    async def chunks(self, events: AsyncIterator[ChoiceEvent], usage: Usage) -> AsyncIterator[ChatCompletionChunk]:
        """Every chunk of the stream. The role chunks wait for the engine's first output, so
        a request refused before then raises (api/core/sse.py `prefetched` makes that an
        HTTP error); a failure once streaming has begun raises too, and the SSE layer ends
        the stream with an error event in OpenAI's error shape."""
        self.usage = usage
        started = False
        async with aclosing(events):
            async for event in events:
                if not started:
                    started = True
                    for chunk in self.role_chunks():
                        yield chunk
                for chunk in self.event_chunks(event):
                    yield chunk
        if self.plan.include_usage:
            yield self.chunk([], usage=usage_of(usage))

    def role_chunks(self) -> list[ChatCompletionChunk]:
        delta = ChatCompletionChunkDelta(role="assistant", content="")
        return [self.chunk([self.choice(choice.index, delta)]) for choice in self.plan.choices]

    def event_chunks(self, event: ChoiceEvent) -> list[ChatCompletionChunk]:
        logprobs = self.plan.logprobs and bool(event.logprobs)
        logprob_list = choice_logprobs(self.tokenizer, event.logprobs) if logprobs else None
        tools = self.tool_deltas.get(event.index)
        deltas = [reasoning_delta(event.reasoning_text)] if event.reasoning_text else []
        if tools is not None:
            deltas += tools.feed(event.text, final=event.finish_reason is not None)
        elif event.text:
            deltas.append(ChatCompletionChunkDelta(content=event.text))
        if logprob_list is not None and not deltas:
            deltas = [ChatCompletionChunkDelta(content="")]
        chunks = [self.chunk([self.choice(event.index, delta, logprobs=logprob_list if i == 0 else None)])
                  for i, delta in enumerate(deltas)]
        if event.finish_reason is not None:
            reason = finish_reason(event.finish_reason)
            reason = tools.finish_reason(reason) if tools is not None else reason
            chunks.append(self.chunk([self.choice(event.index, ChatCompletionChunkDelta(), reason)]))
        return chunks

    def choice(self, index: int, delta: ChatCompletionChunkDelta, reason: str | None = None,
               logprobs: ChatCompletionChoiceLogprobs | None = None) -> ChatCompletionChunkChoice:
        return ChatCompletionChunkChoice(index=index, delta=delta, finish_reason=reason, logprobs=logprobs)

    def chunk(self, choices: list[ChatCompletionChunkChoice], usage: CompletionUsage | None = None
              ) -> ChatCompletionChunk:
        chunk = ChatCompletionChunk(id=self.identity.id, object="chat.completion.chunk",
                                    created=self.identity.created, model=self.identity.model,
                                    choices=choices, service_tier=self.identity.service_tier)
        if self.plan.include_usage:
            chunk.usage = usage  # null in every chunk but the last, as the spec says
            if usage is None and self.plan.continuous_usage:
                chunk.usage = usage_of(self.usage)  # the counts so far
        if self.plan.include_obfuscation:
            chunk.obfuscation = obfuscation_padding()
        return chunk
