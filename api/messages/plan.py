"""An Anthropic Messages body (POST /v1/messages) to the engine request of its one reply.

The conversation becomes prompt ids through the model's chat template, the way chat
completions render theirs (api/core/prompt.py), in one function, `prompt_ids`, that
POST /v1/messages/count_tokens counts with too (api/messages/count.py):
- `system`, a string or text blocks, becomes a leading system message;
- a `system` turn inside `messages` is a system message where it stands;
- a message's text blocks are joined by newlines, as chat content parts are;
- a last assistant message is a prefill, as Anthropic defines it: the reply continues
  that text (which the response does not repeat), so its text follows the generation
  prompt instead of being rendered as a finished turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from api.core import limits
from api.core.errors import ApiError, invalid
from api.core.generation import ChoiceRequest
from api.core.prompt import PART_SEPARATOR, chat_prompt_ids
from api.core.sampling import check_count, choice_seed_list, engine_values
from api.messages.body import MODELS, MessagesBody
from api.messages.fields import REGISTRY
from api.core.state import ServerState
from generated.flint import CountMessageTokensRequest, TextBlockParam

# The bodies whose conversation makes a prompt: a message's, and a token count's.
PromptBody = MessagesBody | CountMessageTokensRequest

log = logging.getLogger("flint")


@dataclass(frozen=True)
class MessagesPlan:
    """The reply to generate, and how to send it."""

    choices: list[ChoiceRequest]
    stream: bool
    timeout: float | None = None


async def plan_messages(body: MessagesBody, server: ServerState) -> MessagesPlan:
    """The engine request of the reply to `body`."""
    if body.metadata is not None and body.metadata.user_id is not None:
        log.info("message for user_id %r", body.metadata.user_id)
    ids = await prompt_ids(body, server)
    values = engine_values(REGISTRY, MODELS, body.__dict__, body.model_fields_set, server.tokenizer.vocab_size)
    [seed] = choice_seed_list(None, 1)  # Anthropic has no seed field: each reply draws its own
    choice = ChoiceRequest(
        index=0, prompt_index=0, prompt_token_ids=ids, sampling=values.sampling_params(seed=seed),
        stop=values.stop_criteria(strings=stop_sequences(body), max_tokens=check_count("max_tokens", body.max_tokens)))
    return MessagesPlan(choices=[choice], stream=bool(body.stream))


async def prompt_ids(body: PromptBody, server: ServerState) -> list[int]:
    """The prompt token ids of `body`'s reply: what POST /v1/messages generates from and
    POST /v1/messages/count_tokens counts (a 400 when the template refuses the
    conversation or its prompt cannot fit)."""
    conversation, prefill = template_conversation(body)
    return await chat_prompt_ids(server, conversation, prefill=prefill)


def template_conversation(body: PromptBody) -> tuple[list[dict[str, Any]], str]:
    """The messages in the chat shape the template takes, and the final assistant prefill."""
    if not body.messages:
        raise invalid("messages", "`messages` must hold at least one message")
    conversation = []
    system = blocks_text(body.system)
    if system:
        conversation.append({"role": "system", "content": system})
    for message in body.messages:
        conversation.append({"role": message.role.value, "content": blocks_text(message.content)})
    prefill = ""
    if conversation[-1]["role"] == "assistant":
        prefill = conversation.pop()["content"]
        if prefill != prefill.rstrip():  # as Anthropic: the model would continue after the space
            raise ApiError(400, "the final assistant message (a prefill) must not end with whitespace",
                           param=f"messages.[{len(body.messages) - 1}].content")
    return conversation, prefill


def blocks_text(content: str | list | None) -> str:
    """A string, or text blocks joined by newlines as chat text parts are. The registry has
    refused every other block type before this runs."""
    if content is None or isinstance(content, str):
        return content or ""
    blocks = [getattr(block, "root", block) for block in content]
    if not all(isinstance(block, TextBlockParam) for block in blocks):
        raise invalid("messages", "only text blocks can be read by this text-only model")
    return PART_SEPARATOR.join(block.text for block in blocks)


def stop_sequences(body: MessagesBody) -> tuple[str, ...]:
    return limits.check_strings("stop_sequences", tuple(body.stop_sequences or ()), limits.MAX_STOP_SEQUENCES)
