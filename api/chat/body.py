"""The /v1/chat/completions body: OpenAI's request plus the fields of Fireworks' chat request
(spec/asyncapi, the AsyncAPI chat schema) that OpenAI's lacks, such as top_k or min_p.

Where both define a field, OpenAI's type rules, but for `response_format`, which also
takes Fireworks' `grammar` type, and `reasoning_effort`, which takes every form of
Fireworks' (seed 000: OpenAI's levels, `max`, a bool or a token budget). Messages follow
OpenAI's shapes, an assistant's with Fireworks' `reasoning_content` (api/chat/reasoning.py);
the part types only Fireworks defines (`video_url` and `audio_url`) are refused by name
with a 400 before OpenAI's schema would call them unknown. Unknown fields at any depth are
schema violations (400 in OpenAI's shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import pydantic

from api.chat.fields import REGISTRY
from api.chat.reasoning import ChatMessage
from api.core.validation import parse_body, require_object
from generated import fireworks_completions
from generated import fireworks_streaming as fireworks
from generated import openai_chat_completions as openai

OPENAI_FIELDS = openai.CreateChatCompletionRequest.model_fields
FIREWORKS_ONLY_FIELDS = tuple(name for name in fireworks.ChatCompletionRequest.model_fields
                              if name not in OPENAI_FIELDS)
OPENAI_MESSAGE_FIELDS = {name for model in openai.ChatCompletionRequestMessage.model_fields["root"].annotation.__args__
                         for name in model.model_fields}
FIREWORKS_ONLY_MESSAGE_FIELDS = sorted(set(fireworks.ChatMessage.model_fields) - OPENAI_MESSAGE_FIELDS)
OPENAI_PART_TYPES = {"text", "refusal", "image_url", "input_audio", "file"}
FIREWORKS_ONLY_PART_TYPES = {part.value for part in fireworks.Type1} - OPENAI_PART_TYPES
# The request models the body merges, whose registry tables decide its fields.
MODELS = (openai.CreateChatCompletionRequest, fireworks.ChatCompletionRequest)


def _fireworks_field(name: str) -> tuple[Any, None]:
    info = fireworks.ChatCompletionRequest.model_fields[name]
    annotated = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return annotated | None, None


# OpenAI's formats, or Fireworks' (its completions format, whose `grammar` type takes a GBNF
# grammar; Fireworks' chat schema names the type but not its fields).
RESPONSE_FORMAT = (openai.ChatCompletionResponseFormat | fireworks_completions.ResponseFormat | None, None)
# Every form of reasoning effort (api/core/reasoning.py reads and bounds it).
REASONING_EFFORT = (Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | bool | int | None, None)

ChatCompletionBody = pydantic.create_model(
    "ChatCompletionBody", __base__=openai.CreateChatCompletionRequest, response_format=RESPONSE_FORMAT,
    reasoning_effort=REASONING_EFFORT, messages=(Annotated[list[ChatMessage], pydantic.Field(min_length=1)], ...),
    **{name: _fireworks_field(name) for name in FIREWORKS_ONLY_FIELDS})


def parse(raw: object) -> ChatCompletionBody:
    """The body as a ChatCompletionBody (a schema violation at any depth raises); the
    Fireworks-only message fields and parts the registry refuses are refused first."""
    body = require_object(raw)
    refuse_fireworks_message_fields(body.get("messages"))
    return parse_body(ChatCompletionBody, body, extra="forbid")


def refuse_fireworks_message_fields(messages: Any) -> None:
    """400 for a Fireworks-only message field or content part that the registry refuses."""
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, Mapping):
            continue
        given = {name for name in FIREWORKS_ONLY_MESSAGE_FIELDS if name in message}
        REGISTRY.refuse_unsupported([fireworks.ChatMessage], given, message, f"messages.[{index}].")
        parts = message.get("content")
        for part_index, part in enumerate(parts if isinstance(parts, list) else []):
            part_type = part.get("type") if isinstance(part, Mapping) else None
            # A `type` that is not a string (an object, a list) is left to the schema's error.
            if isinstance(part_type, str) and part_type in FIREWORKS_ONLY_PART_TYPES:
                REGISTRY.refuse_unsupported([fireworks.ChatMessageContent], {part_type}, part,
                                            f"messages.[{index}].content.[{part_index}].")
