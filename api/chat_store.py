"""`store: true` chat completions: what is kept, and the stored objects as the API shows them.

A stored completion keeps the request body as sent, its messages (each with its own id,
`<completion id>-<index>`, as OpenAI numbers them), the ChatCompletion as returned, its
metadata, model and created time. A streamed completion is assembled from the same
choice events its chunks were made of, and stored when the stream ends, before `[DONE]`;
a stream that fails or that the client leaves is not stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from api.chat_request import ChatPlan
from api.chat_response import ChunkWriter, ResponseIdentity, chat_completion
from api.generation import ChoiceEvent, ChoiceResult, Generation, Usage
from api.state import ServerState
from api.store import StoredChatCompletion
from generated.flint import ErrorResponse
from generated.openai_chat_completions import ChatCompletion, CreateChatCompletionRequest


class RecordedGeneration:
    """A Generation whose events are also collected, as `collect` would, so that a streamed
    reply can be stored whole. Stands in for the Generation it wraps (events, usage)."""

    def __init__(self, generation: Generation) -> None:
        self.generation = generation
        self.results = {choice.index: ChoiceResult(choice.index, choice.prompt_index)
                        for choice in generation.choices}

    @property
    def usage(self) -> Usage:
        return self.generation.usage

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        async with aclosing(self.generation.events()) as events:
            async for event in events:
                self.results[event.index].add(event)
                yield event

    def ordered_results(self) -> list[ChoiceResult]:
        return [self.results[index] for index in sorted(self.results)]


def stored_messages(completion_id: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages as ChatCompletionStoreMessage objects."""
    return [store_message(f"{completion_id}-{index}", message) for index, message in enumerate(messages)]


def store_message(message_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """One message: text content as `content`. Content sent as parts keeps its text parts
    in `content_parts`, with `content` their text joined; a refusal part (an assistant's)
    becomes `refusal`, which the stored message has a field for."""
    content = message.get("content")
    stored = {"id": message_id, "role": message["role"], "content": content}
    for name in ("name", "refusal"):
        if message.get(name) is not None:
            stored[name] = message[name]
    if isinstance(content, list):
        texts = [part for part in content if part.get("type") == "text"]
        refusals = [part["refusal"] for part in content if part.get("type") == "refusal"]
        stored["content"] = "".join(part["text"] for part in texts) if texts else None
        stored["content_parts"] = texts or None
        if refusals:
            stored["refusal"] = "".join(refusals)
    return stored


async def save_completion(server: ServerState, raw_request: dict[str, Any], request: CreateChatCompletionRequest,
                          completion: ChatCompletion) -> None:
    """Stores `completion` (committed on return)."""
    metadata = request.metadata.root if request.metadata is not None else None
    completion_json = completion.model_dump(mode="json", exclude_unset=True)
    await server.store.save_chat_completion(
        completion.id, completion.model, completion.created, raw_request,
        stored_messages(completion.id, raw_request["messages"]), completion_json, metadata)


def chat_chunks(server: ServerState, raw_request: dict[str, Any], request: CreateChatCompletionRequest,
                identity: ResponseIdentity, plan: ChatPlan, generation: Generation) -> AsyncIterator[Any]:
    """The chunks of a streamed reply; with `store: true`, stored when the last is sent."""
    if not request.store:
        return ChunkWriter(identity, plan, server.tokenizer).chunks(generation)
    recorded = RecordedGeneration(generation)
    chunks = ChunkWriter(identity, plan, server.tokenizer).chunks(recorded)
    return stored_at_end(server, raw_request, request, identity, plan, recorded, chunks)


async def stored_at_end(server: ServerState, raw_request: dict[str, Any], request: CreateChatCompletionRequest,
                        identity: ResponseIdentity, plan: ChatPlan, recorded: RecordedGeneration,
                        chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """`chunks`, then the assembled completion stored once the last has been sent
    (unless the stream ended with an error event)."""
    failed = False
    async with aclosing(chunks):
        async for chunk in chunks:
            failed = failed or isinstance(chunk, ErrorResponse)
            yield chunk
    if not failed:
        completion = chat_completion(identity, plan, server.tokenizer, recorded.ordered_results(), recorded.usage)
        await save_completion(server, raw_request, request, completion)


def stored_view(stored: StoredChatCompletion) -> dict[str, Any]:
    """A stored completion as GET returns it: the completion with its current metadata."""
    return {**stored.completion, "metadata": stored.metadata}
