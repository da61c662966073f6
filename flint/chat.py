"""A conversation made the prompt `LLM.chat` generates from: the model's chat template,
with tools written in as the HTTP API writes them (api/core/tool_prompt.py): as the
template's `tools` variable where it renders tools itself, else Flint's default preamble
in the system message, documented in the README."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.core.prompt import template_messages
from api.core.tool_prompt import tool_conversation
from api.core.tools import Tool
from engine.text.tokenizer import Tokenizer

Message = Mapping[str, Any]


def chat_prompt_ids(tokenizer: Tokenizer, messages: Sequence[Message], tools: Sequence[Mapping] | None = None,
                    add_generation_prompt: bool = True, chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The token ids of `messages` (OpenAI's shape: role and content, text or text parts),
    rendered by the chat template with `tools` (OpenAI's function tools) and the template's
    own variables; the messages' text stays plain text (a special token's name in it is
    not that token)."""
    template = tokenizer.chat_template or ""
    history = template_messages([dict(message) for message in messages], template)
    converted, variables = tool_conversation(history, [function_tool(tool) for tool in tools or ()] or None, template)
    prompt = tokenizer.render_chat_prompt(converted, add_generation_prompt=add_generation_prompt,
                                          **{**variables, **(chat_template_kwargs or {})})
    return tokenizer.encode_chat(prompt)


def function_tool(tool: Mapping) -> Tool:
    """An OpenAI function tool ({"type": "function", "function": {name, description,
    parameters}}, or the function object alone) as the API's Tool."""
    function = tool.get("function", tool)
    if "name" not in function:
        raise ValueError(f"a tool names its function: {dict(tool)!r}")
    return Tool(name=function["name"], description=function.get("description", ""),
                parameters=function.get("parameters"))


def conversations_of(messages: Sequence[Message] | Sequence[Sequence[Message]]) -> list[Sequence[Message]]:
    """One conversation, or a list of them, as a list."""
    if messages and isinstance(messages[0], Mapping):
        return [messages]
    return list(messages)
