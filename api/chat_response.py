"""Generated choices to OpenAI chat completion objects: the whole response, or stream chunks.

A stream gives each choice a first chunk with the assistant role, then content deltas,
then a chunk with its finish_reason; with `stream_options.include_usage` every chunk
carries `usage: null` and one last chunk with no choices carries the totals.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field

from api.chat_request import ChatPlan
from api.errors import ApiError
from api.generation import ChoiceEvent, ChoiceResult, Generation, Usage
from engine.request import TokenLogprob
from engine.tokenizer import Tokenizer
from generated.openai_chat_completions import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChoiceLogprobs,
    ChatCompletionChunk,
    ChatCompletionChunkChoice,
    ChatCompletionChunkDelta,
    ChatCompletionMessage,
    ChatCompletionTokenLogprob,
    ChatCompletionTopLogprob,
    CompletionUsage,
    PromptTokensDetails,
)
from generated.flint import ErrorResponse

# The tier every request is served with: this server has one.
SERVICE_TIER = "default"
# Obfuscation padding lengths: enough spread that a chunk's size says little about its text.
OBFUSCATION_CHARS = (1, 24)


@dataclass(frozen=True)
class ResponseIdentity:
    """What every object of one response shares."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


def token_entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> ChatCompletionTopLogprob:
    raw = tokenizer.token_bytes(token_id)
    return ChatCompletionTopLogprob(token=token_text(tokenizer, token_id, raw), logprob=logprob,
                                    bytes=None if raw is None else list(raw))


def token_text(tokenizer: Tokenizer, token_id: int, raw: bytes | None) -> str:
    """The token as text; a piece of a character is written as its bytes, as OpenAI does
    (`bytes:\\xe2\\x80`), since it has no text of its own."""
    if raw is None:
        return tokenizer.decode([token_id])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{byte:02x}" for byte in raw)


def choice_logprobs(tokenizer: Tokenizer, logprobs: Sequence[TokenLogprob]) -> ChatCompletionChoiceLogprobs:
    """The content list: each token's logprob under the model, with its top alternatives."""
    content = []
    for item in logprobs:
        chosen = token_entry(tokenizer, item.token_id, item.logprob)
        top = [token_entry(tokenizer, token, value) for token, value in item.top]
        content.append(ChatCompletionTokenLogprob(**chosen.model_dump(), top_logprobs=top))
    return ChatCompletionChoiceLogprobs(content=content, refusal=None)


def usage_of(usage: Usage) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=usage.num_prompt_tokens, completion_tokens=usage.num_completion_tokens,
        total_tokens=usage.num_prompt_tokens + usage.num_completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.num_cached_tokens),
    )


def finish_reason(reason: str | None) -> str:
    """The chat finish reason; a generation that broke off has none in the chat schema."""
    if reason in ("stop", "length"):
        return reason
    raise ApiError(500, "generation failed before the reply was complete", error_type="server_error")


def chat_completion(identity: ResponseIdentity, plan: ChatPlan, tokenizer: Tokenizer,
                    results: list[ChoiceResult], usage: Usage) -> ChatCompletion:
    choices = [
        ChatCompletionChoice(
            index=result.index,
            message=ChatCompletionMessage(role="assistant", content=result.text, refusal=None),
            finish_reason=finish_reason(result.finish_reason),
            logprobs=choice_logprobs(tokenizer, result.logprobs) if plan.logprobs else None,
        )
        for result in results
    ]
    return ChatCompletion(id=identity.id, object="chat.completion", created=identity.created,
                          model=identity.model, choices=choices, usage=usage_of(usage),
                          service_tier=SERVICE_TIER)


class ChunkWriter:
    """Chunks of one streamed response, in the order the module docstring gives."""

    def __init__(self, identity: ResponseIdentity, plan: ChatPlan, tokenizer: Tokenizer) -> None:
        self.identity = identity
        self.plan = plan
        self.tokenizer = tokenizer

    async def chunks(self, generation: Generation) -> AsyncIterator[ChatCompletionChunk | ErrorResponse]:
        """Every chunk of the stream. The role chunks wait for the engine's first output, so
        a request refused before then raises (api/sse.py `prefetched` makes that an HTTP
        error); a failure once streaming has begun ends it with an error event in OpenAI's
        error shape, the status line being sent already."""
        started = False
        async with aclosing(generation.events()) as events:
            try:
                async for event in events:
                    if not started:
                        started = True
                        for choice in self.plan.choices:
                            delta = ChatCompletionChunkDelta(role="assistant", content="")
                            yield self.chunk([self.choice(choice.index, delta)])
                    for chunk in self.event_chunks(event):
                        yield chunk
            except ApiError as error:
                if not started:
                    raise
                yield error.body
                return
        if self.plan.include_usage:
            yield self.chunk([], usage=usage_of(generation.usage))

    def event_chunks(self, event: ChoiceEvent) -> list[ChatCompletionChunk]:
        chunks = []
        logprobs = self.plan.logprobs and bool(event.logprobs)
        if event.text or logprobs:
            delta = ChatCompletionChunkDelta(content=event.text)
            logprob_list = choice_logprobs(self.tokenizer, event.logprobs) if logprobs else None
            chunks.append(self.chunk([self.choice(event.index, delta, logprobs=logprob_list)]))
        if event.finish_reason is not None:
            reason = finish_reason(event.finish_reason)
            chunks.append(self.chunk([self.choice(event.index, ChatCompletionChunkDelta(), reason)]))
        return chunks

    def choice(self, index: int, delta: ChatCompletionChunkDelta, reason: str | None = None,
               logprobs: ChatCompletionChoiceLogprobs | None = None) -> ChatCompletionChunkChoice:
        return ChatCompletionChunkChoice(index=index, delta=delta, finish_reason=reason, logprobs=logprobs)

    def chunk(self, choices: list[ChatCompletionChunkChoice], usage: CompletionUsage | None = None) -> ChatCompletionChunk:
        chunk = ChatCompletionChunk(id=self.identity.id, object="chat.completion.chunk",
                                    created=self.identity.created, model=self.identity.model,
                                    choices=choices, service_tier=SERVICE_TIER)
        if self.plan.include_usage:
            chunk.usage = usage  # null in every chunk but the last, as the spec says
        if self.plan.include_obfuscation:
            chunk.obfuscation = obfuscation_padding()
        return chunk


def obfuscation_padding() -> str:
    low, high = OBFUSCATION_CHARS
    return secrets.token_urlsafe(high)[: low + secrets.randbelow(high - low + 1)]
