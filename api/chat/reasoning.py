"""Reasoning in chat completions: Fireworks' `reasoning_content`, beside OpenAI's shapes.

In a request, an assistant message may carry the `reasoning_content` of its turn (Fireworks'
chat message): `AssistantMessage` is OpenAI's assistant message with that field, and the
body's messages are OpenAI's with it in the assistant's place. The history mode decides
whether it reaches the template (api/core/reasoning_prompt.py).

In an answer from a model that reasons, `message.reasoning_content` holds the thinking
(null when there was none), and a stream sends it as `delta.reasoning_content` chunks
before the content of the same step. OpenAI's SDK reads the field from `model_extra`.
The objects are subclasses of OpenAI's models, so they are written with pydantic's
`serialize_as_any` wherever chat objects are dumped (api/chat/render.py, store.py, and
api/core/sse.py for stream chunks).
"""

from __future__ import annotations

from typing import Annotated

import pydantic

from generated import openai_chat_completions as openai


class AssistantMessage(openai.ChatCompletionRequestAssistantMessage):
    """OpenAI's assistant message with Fireworks' `reasoning_content`."""

    reasoning_content: str | None = None


class ChatMessage(pydantic.RootModel):
    """One message of the conversation, told apart by its `role`."""

    root: Annotated[
        openai.ChatCompletionRequestDeveloperMessage | openai.ChatCompletionRequestSystemMessage
        | openai.ChatCompletionRequestUserMessage | AssistantMessage | openai.ChatCompletionRequestToolMessage
        | openai.ChatCompletionRequestFunctionMessage,
        pydantic.Field(discriminator="role"),
    ]


class ReasoningMessage(openai.ChatCompletionMessage):
    """The answer's message, with the thinking apart from its content."""

    reasoning_content: str | None = None


class ReasoningDelta(openai.ChatCompletionChunkDelta):
    """A stream chunk's delta carrying the next piece of the thinking."""

    reasoning_content: str | None = None


def with_reasoning(message: openai.ChatCompletionMessage, reasoning: str) -> ReasoningMessage:
    """`message` with its `reasoning_content` (null when the model did not think)."""
    return ReasoningMessage.model_construct(message.model_fields_set | {"reasoning_content"},
                                           **dict(message), reasoning_content=reasoning or None)


def reasoning_delta(text: str) -> ReasoningDelta:
    return ReasoningDelta(reasoning_content=text)
