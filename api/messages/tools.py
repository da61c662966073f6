"""The Messages request's tool fields, read into the shared shapes of api/core/tools.py.

- `tools`: Anthropic's client tools (`name`, `description`, `input_schema`, `strict`); an
  `input_examples` list is shown to the model after the tool's description, one JSON
  object a line, under "Example inputs:". Anthropic's hosted tools are not in the spec,
  so they are schema errors;
- `tool_choice`: `auto` (the default with tools), `any` (some tool must be called), `tool`
  (the named one must be), `none` (no call); `disable_parallel_tool_use: true` allows one
  call at most.
Under `none` the tools stay in the prompt, as Anthropic keeps them there (a conversation
with earlier calls still reads as one, and the prompt's prefix stays the same), but the
answer is text, neither constrained nor read for calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from api.core.errors import invalid
from api.core.tools import Tool, ToolChoice, callable_tools, check_tools

# Anthropic's tool_choice types, as the shared modes.
MODES = {"auto": "auto", "any": "required", "tool": "required", "none": "none"}
NAME_PATH = "tools.[{index}].name"
SCHEMA_PATH = "tools.[{index}].input_schema"


@dataclass(frozen=True)
class MessagesTools:
    """The request's tools, and those the answer may call under its choice."""

    given: tuple[Tool, ...]  # every tool of the request, in its order: all of them are in the prompt
    choice: ToolChoice
    callable: tuple[Tool, ...] = ()  # empty under `none`

    @property
    def answered(self) -> bool:
        """Whether the answer may hold calls (it is constrained and read for them)."""
        return self.choice.mode != "none"


def messages_tools(body: Any) -> MessagesTools | None:
    """The tools and choice of a message's (or a token count's) body; None without tools."""
    tools = [read_tool(tool.model_dump(mode="json", by_alias=True, exclude_unset=True)) for tool in body.tools or []]
    check_tools(tools, NAME_PATH, SCHEMA_PATH)
    choice = read_choice(plain_choice(body.tool_choice), bool(tools))
    if not tools:
        if choice.mode == "required":
            raise invalid("tool_choice", "`tool_choice` requires a tool call, but no tools are given")
        return None
    if choice.mode == "none":
        return MessagesTools(tuple(tools), choice)
    return MessagesTools(tuple(tools), choice, tuple(callable_tools(tools, choice, "tool_choice.name")))


def read_tool(tool: dict[str, Any]) -> Tool:
    return Tool(tool["name"], described(tool), tool["input_schema"], bool(tool.get("strict")))


def described(tool: dict[str, Any]) -> str:
    """The tool's description, followed by its example inputs when it has some."""
    description = tool.get("description") or ""
    examples = tool.get("input_examples")
    if not examples:
        return description
    lines = "\n".join(json.dumps(example) for example in examples)
    return f"{description}\n\nExample inputs:\n{lines}" if description else f"Example inputs:\n{lines}"


def plain_choice(value: Any) -> dict[str, Any] | None:
    return None if value is None else value.model_dump(mode="json", exclude_unset=True)


def read_choice(value: dict[str, Any] | None, has_tools: bool) -> ToolChoice:
    """`tool_choice` as a ToolChoice (the default: auto with tools, none without)."""
    if value is None:
        return ToolChoice("auto" if has_tools else "none")
    parallel = not value.get("disable_parallel_tool_use")
    names = (value["name"],) if value["type"] == "tool" else None
    return ToolChoice(MODES[value["type"]], names=names, parallel=parallel)
