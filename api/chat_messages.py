"""Chat messages to prompt token ids: the model's chat template over text-only messages.

Works on messages as plain dicts (the OpenAI chat shape, as `model_dump` gives it), so
every route that renders a conversation turns it into the same prompt.

How each role reaches the template:
- system, user, assistant and tool go through unchanged;
- developer (OpenAI's newer name for system instructions) becomes system, and function
  (the deprecated predecessor of tool results) becomes tool, unless the template names
  the role itself: most templates know only the older roles, and a role they do not know
  is either rendered verbatim or refused;
- `name` and `tool_call_id` stay on the message for templates that use them.

Content is text for every text-only template: a list of text parts becomes their texts
joined by newlines (as vLLM does), a refusal becomes the assistant's text. Image, audio
and file parts are refused, since every served model is text-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from api.errors import ApiError
from engine.tokenizer import Tokenizer

# Roles a template may not know, and the older role that means the same to a model.
FALLBACK_ROLES = {"developer": "system", "function": "tool"}
# Content part types a text-only model cannot take, and what they carry.
NON_TEXT_PARTS = {"image_url": "image", "input_audio": "audio", "file": "file"}
PART_SEPARATOR = "\n"


def chat_prompt_ids(tokenizer: Tokenizer, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """The token ids of the prompt the chat template makes of `messages`.

    The template writes every special token itself, so none is added on encoding (as
    transformers' `apply_chat_template(tokenize=True)` does)."""
    return tokenizer.encode(render_prompt(tokenizer, messages), add_special_tokens=False)


def render_prompt(tokenizer: Tokenizer, messages: Sequence[Mapping[str, Any]],
                  add_generation_prompt: bool = True, **variables: Any) -> str:
    """The prompt text for `messages`, by default ending with the header of an assistant
    turn; `variables` are extra template variables. A template refusal is a 400."""
    converted = template_messages(messages, tokenizer.chat_template or "")
    try:
        return tokenizer.render_chat(converted, add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.TemplateError as error:  # the template's raise_exception, or no template
        raise ApiError(400, f"the model's chat template refused the messages: {error}",
                       param="messages") from None


def template_messages(messages: Sequence[Mapping[str, Any]], template: str) -> list[dict[str, Any]]:
    """The messages as a text-only chat template expects them (see the module docstring)."""
    return [template_message(message, index, template) for index, message in enumerate(messages)]


def template_message(message: Mapping[str, Any], index: int, template: str) -> dict[str, Any]:
    role = template_role(message["role"], template)
    converted = {"role": role, "content": message_text(message, index)}
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None:
            converted[key] = message[key]
    return converted


def template_role(role: str, template: str) -> str:
    """`role`, or its older equivalent when the template never names it."""
    fallback = FALLBACK_ROLES.get(role)
    if fallback is None or f"'{role}'" in template or f'"{role}"' in template:
        return role
    return fallback


def message_text(message: Mapping[str, Any], index: int) -> str:
    """The message's content as one string (a refusal counts as the assistant's text)."""
    content = message.get("content")
    if isinstance(content, list):
        content = PART_SEPARATOR.join(part_text(part, index, j) for j, part in enumerate(content))
    texts = [text for text in (content, message.get("refusal")) if text]
    return PART_SEPARATOR.join(texts)


def part_text(part: Mapping[str, Any], index: int, part_index: int) -> str:
    part_type = part.get("type")
    if part_type == "text":
        return part["text"]
    if part_type == "refusal":
        return part["refusal"]
    kind = NON_TEXT_PARTS.get(part_type, "non-text")
    raise ApiError(400, f"messages[{index}].content[{part_index}] is an `{part_type}` part, "
                        f"but this model is text-only: it cannot take {kind} input",
                   param=f"messages.[{index}].content.[{part_index}].{part_type}",
                   code="unsupported_content_part")
