"""Prompts: conversations through the chat template, texts through the tokenizer, and the
check that a prompt fits the context window. Shared by every dialect.

Rendering and tokenizing run in a worker thread, never on the event loop: a long prompt
takes long to encode, and every stream and /health would wait meanwhile. Before a text is
tokenized at all, its size is checked against what could possibly fit (`check_text_size`).

Messages are plain dicts in the OpenAI chat shape. How each reaches the template:
- system, user, assistant and tool go through unchanged;
- developer (OpenAI's newer name for system instructions) becomes system, and function
  (the deprecated predecessor of tool results) becomes tool, unless the template names
  the role itself: most templates know only the older roles;
- `name`, `tool_call_id` and `tool_calls` stay on the message for templates that use
  them (api/core/tool_prompt.py writes calls and results into the text for those that don't),
  and so does an assistant's `reasoning_content`, as the request's reasoning history mode
  leaves it (api/core/reasoning_prompt.py);
- content is text: a list of text parts becomes their texts joined by newlines (as vLLM
  does), a refusal becomes the assistant's text.
Special-token strings inside message content are encoded as plain text, so a message can
never forge a role marker (engine/text/tokenizer.py); `--allow-special-tokens-in-content`
restores parsing them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2

from api.core.errors import ApiError, invalid
from api.core.reasoning_prompt import ReasoningPlan
from api.core.state import ServerState
from api.core.tool_prompt import tool_conversation
from api.core.tools import Tool
from engine.text.tokenizer import Tokenizer

# Roles a template may not know, and the older role that means the same to a model.
FALLBACK_ROLES = {"developer": "system", "function": "tool"}
PART_SEPARATOR = "\n"
# Content part types a text-only model cannot take, and what they carry.
NON_TEXT_PARTS = {"image_url": "image", "input_audio": "audio", "file": "file"}


def check_prompt_fits(num_prompt_tokens: int, max_model_len: int, param: str, what: str = "the prompt") -> None:
    """A 400 naming `param` when the prompt leaves no room for one generated token."""
    if num_prompt_tokens >= max_model_len:
        raise ApiError(400, f"{what} (`{param}`) has {num_prompt_tokens} tokens; this server's context window is "
                            f"{max_model_len} tokens, with room for at least one generated token",
                       param=param, code="context_length_exceeded")


def check_text_size(server: ServerState, num_bytes: int, param: str) -> None:
    """Refuse, before tokenizing, text too long to fit whatever it tokenizes to: every token
    stands for at most `server.max_token_bytes` bytes."""
    limit = server.max_model_len * server.max_token_bytes
    if num_bytes > limit:
        raise ApiError(400, f"`{param}` is {num_bytes} bytes long; no text over {limit} bytes fits this "
                            f"server's context window of {server.max_model_len} tokens",
                       param=param, code="context_length_exceeded")


async def text_prompt_ids(server: ServerState, texts: Sequence[str], param: str) -> list[list[int]]:
    """Each text's token ids, special tokens parsed and BOS added where the model wants it
    (as vLLM tokenizes completion prompts), encoded in a worker thread."""
    check_text_size(server, sum(len(text.encode()) for text in texts), param)
    tokenizer = server.tokenizer
    return await asyncio.to_thread(lambda: [tokenizer.encode(text) for text in texts])


async def chat_prompt_ids(server: ServerState, messages: Sequence[Mapping[str, Any]], *, param: str = "messages",
                          prefill: str = "", tools: list[Tool] | None = None,
                          reasoning: ReasoningPlan | None = None) -> list[int]:
    """The token ids of the prompt the chat template makes of `messages` and `tools`
    (api/core/tool_prompt.py), with the request's `reasoning` (its template switch and
    history), opening an assistant turn that starts with `prefill`; a 400 naming `param`
    when the template refuses the messages or the prompt cannot fit. All of it runs in a
    worker thread."""
    ids = await asyncio.to_thread(conversation_ids, server, messages, prefill, param, tools, reasoning)
    check_prompt_fits(len(ids), server.max_model_len, param, "the conversation's prompt")
    return ids


def conversation_ids(server: ServerState, messages: Sequence[Mapping[str, Any]], prefill: str,
                     param: str, tools: list[Tool] | None = None, reasoning: ReasoningPlan | None = None) -> list[int]:
    """(In a worker thread.) The messages made text, their size checked, then rendered and encoded."""
    template = server.tokenizer.chat_template or ""
    reasoning = reasoning or ReasoningPlan()
    history = reasoning.history_messages(template_messages(messages, template))
    converted, variables = tool_conversation(history, tools, template)
    variables.update(reasoning.template_variables(template))
    check_text_size(server, len(prefill.encode()) + sum(len(m["content"].encode()) for m in converted)
                    + sum(len((m.get("reasoning_content") or "").encode()) for m in converted)
                    + len(json.dumps(variables)), param)
    return encode_chat(server, converted, prefill, param, lambda text: reasoning.check_rendered(converted, text),
                       **variables)


def encode_chat(server: ServerState, messages: list[dict[str, Any]], prefill: str, param: str,
                check: Callable[[str], None] | None = None, **variables: Any) -> list[int]:
    """Render and encode: the template's markers are special tokens, the messages' own text
    is plain text unless the server allows otherwise. `check(text)` sees the rendered text."""
    prompt = render(server.tokenizer, messages, param, **variables)
    if check is not None:
        check(prompt.text)
    if prefill:
        prompt = prompt.continued(prefill)
    return server.tokenizer.encode_chat(prompt, special_tokens_in_content=server.settings.allow_special_tokens_in_content)


def render(tokenizer: Tokenizer, messages: list[dict[str, Any]], param: str, add_generation_prompt: bool = True,
           **variables: Any):
    """The ChatPrompt of `messages` (engine/text/tokenizer.py); a template refusal is a 400."""
    try:
        return tokenizer.render_chat_prompt(messages, add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.TemplateError as error:  # the template's raise_exception, or no template
        raise invalid(param, f"the model's chat template refused the messages: {error}") from None


def template_messages(messages: Sequence[Mapping[str, Any]], template: str) -> list[dict[str, Any]]:
    """The messages as a text-only chat template expects them (see the module docstring)."""
    return [template_message(message, index, template) for index, message in enumerate(messages)]


def template_message(message: Mapping[str, Any], index: int, template: str) -> dict[str, Any]:
    role = template_role(message["role"], template)
    converted = {"role": role, "content": message_text(message, index)}
    for key in ("name", "tool_call_id", "tool_calls", "reasoning_content"):
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
                   param=f"messages.[{index}].content.[{part_index}].{part_type}", code="unsupported_content_part")
