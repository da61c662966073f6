"""`store: true` chat completions: what is kept, and the stored objects as the API shows them.

A stored completion keeps the request body as given, its messages (each with its own id,
`<completion id>-<index>`, as OpenAI numbers them), the ChatCompletion as returned, its
metadata, model and created time. A streamed completion is assembled from the same
choice events its chunks were made of, and stored when the stream ends, before `[DONE]`;
a stream that fails or that the client leaves is not stored."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from api.core.state import ServerState
from api.core.store import StoredChatCompletion
from generated.openai_chat_completions import ChatCompletion


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


async def save_completion(server: ServerState, request: dict[str, Any], completion: ChatCompletion) -> None:
    """Stores `completion` of `request` (its JSON body), committed on return."""
    completion_json = completion.model_dump(mode="json", exclude_unset=True, serialize_as_any=True)
    await server.store.save_chat_completion(
        completion.id, completion.model, completion.created, request,
        stored_messages(completion.id, request["messages"]), completion_json, request.get("metadata"))


async def stored_at_end(server: ServerState, request: dict[str, Any], chunks: AsyncIterator[Any],
                        completion: Callable[[], ChatCompletion]) -> AsyncIterator[Any]:
    """`chunks`, then the completion (assembled by `completion()`) stored once the last has
    been sent; a stream that fails raises before it, and is not stored."""
    async with aclosing(chunks):
        async for chunk in chunks:
            yield chunk
    await save_completion(server, request, completion())


def stored_view(stored: StoredChatCompletion) -> dict[str, Any]:
    """A stored completion as GET returns it: the completion with its current metadata."""
    return {**stored.completion, "metadata": stored.metadata}
