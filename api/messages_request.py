"""An Anthropic Messages body (POST /v1/messages) to the engine request of its one reply.

The body is validated against the Anthropic model (unknown fields refused at every level),
every given field is checked against the field registry (api/messages_fields.py), and the
conversation becomes prompt ids through the model's chat template, the way chat
completions render theirs (api/chat_messages.py):
- `system`, a string or text blocks, becomes a leading system message;
- a message's text blocks are joined by newlines, as chat content parts are;
- a last assistant message is a prefill, as Anthropic defines it: the reply continues
  that text (which the response does not repeat), so its text follows the generation
  prompt instead of being rendered as a finished turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import api.messages_fields  # noqa: F401  (registers the Messages models' fields)
from api.chat_messages import PART_SEPARATOR, render_prompt
from api.chat_request import check_prompt_fits
from api.errors import ApiError
from api.generation import ChoiceRequest
from api.messages_body import MessagesBody
from api.registry import refuse_unsupported_within
from api.sampling_fields import choice_seed_list, sampling_params
from api.state import ServerState
from api.validation import parse_body, require_object
from generated.flint import TextBlockParam

log = logging.getLogger("flint")


@dataclass(frozen=True)
class MessagesPlan:
    """The reply to generate, and how to send it."""

    choice: ChoiceRequest
    stream: bool


def parse_messages_request(raw: object) -> MessagesBody:
    """The body as a MessagesBody; a schema violation at any depth is a RequestValidationError,
    a field the registry refuses a 400."""
    body = parse_body(MessagesBody, require_object(raw), extra="forbid")
    refuse_unsupported_within(body)
    return body


def plan_messages(server: ServerState, body: MessagesBody) -> MessagesPlan:
    """The engine request of the reply to `body`."""
    if body.metadata is not None and body.metadata.user_id is not None:
        log.info("message for user_id %r", body.metadata.user_id)
    prompt_ids = messages_prompt_ids(server, body)
    check_prompt_fits(prompt_ids, server.max_model_len)
    sampling = sampling_params({"temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k,
                                "max_tokens": body.max_tokens}, server.tokenizer.vocab_size)
    # Anthropic has no seed field: each reply draws its own.
    [seed] = choice_seed_list(None, 1)
    choice = ChoiceRequest(index=0, prompt_index=0, prompt_token_ids=prompt_ids,
                           sampling=replace(sampling, seed=seed), stops=stop_sequences(body))
    return MessagesPlan(choice=choice, stream=bool(body.stream))


def messages_prompt_ids(server: ServerState, body: MessagesBody) -> list[int]:
    """The prompt: the conversation through the chat template, then any assistant prefill.

    The template writes every special token itself, so none is added on encoding."""
    if not body.messages:
        raise ApiError(400, "`messages` must hold at least one message", param="messages")
    conversation = template_conversation(body)
    prefill = ""
    if conversation[-1]["role"] == "assistant":
        prefill = conversation.pop()["content"]
        if prefill != prefill.rstrip():  # as Anthropic: the model would continue after the space
            raise ApiError(400, "the final assistant message (a prefill) must not end with whitespace",
                           param=f"messages.[{len(body.messages) - 1}].content")
    prompt = render_prompt(server.tokenizer, conversation) + prefill
    return server.tokenizer.encode(prompt, add_special_tokens=False)


def template_conversation(body: MessagesBody) -> list[dict[str, Any]]:
    """The messages in the chat shape render_prompt takes (text blocks as text parts)."""
    conversation = []
    system = blocks_text(body.system)
    if system:
        conversation.append({"role": "system", "content": system})
    for message in body.messages:
        conversation.append({"role": message.role.value, "content": blocks_text(message.content)})
    return conversation


def blocks_text(content: str | list | None) -> str:
    """A string, or text blocks joined by newlines as chat text parts are. The registry has
    refused every other block type before this runs."""
    if content is None or isinstance(content, str):
        return content or ""
    blocks = [getattr(block, "root", block) for block in content]
    if not all(isinstance(block, TextBlockParam) for block in blocks):
        raise ApiError(400, "only text blocks can be read by this text-only model", param="messages")
    return PART_SEPARATOR.join(block.text for block in blocks)


def stop_sequences(body: MessagesBody) -> tuple[str, ...]:
    stops = tuple(body.stop_sequences or ())
    if "" in stops:
        raise ApiError(400, "`stop_sequences` must not hold an empty string", param="stop_sequences")
    return stops
