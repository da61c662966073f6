"""Tool calling, shared by the chat, Responses and Messages dialects.

Each dialect reads its own tool fields into the neutral shapes here: `Tool` (a function with
a JSON Schema for its arguments, or an OpenAI custom tool whose input is free text, a Lark
grammar or a regex) and `ToolChoice` (none, auto or required, optionally narrowed to some
tools, with or without parallel calls). From them come
- the prompt: the tools rendered by the model's own chat template when it renders tools,
  otherwise by Flint's default preamble in the system message (api/core/tool_prompt.py);
- the grammar every call is constrained by (api/core/tool_grammar.py);
- the calls parsed out of the answer, whole or as a stream (api/core/tool_parser.py).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from api.core.errors import invalid
from engine.text.grammar import Grammar

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's and Anthropic's rule
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    """One tool the model may call.

    A function's `parameters` is the JSON Schema of its arguments (an object); a custom
    tool's `input_grammar` constrains its free-text input (None: any text)."""

    name: str
    description: str = ""
    parameters: dict | None = None  # functions only
    strict: bool = False
    custom: bool = False
    input_grammar: Grammar | None = None  # custom tools only: lark or regex

    @property
    def arguments_schema(self) -> dict:
        return self.parameters if self.parameters is not None else EMPTY_PARAMETERS


@dataclass(frozen=True)
class ToolChoice:
    """Whether the answer may, must or must not call tools, and which.

    `mode` is "none", "auto" or "required"; `names` narrows the callable tools (a named
    function, OpenAI's allowed_tools); `parallel` allows more than one call."""

    mode: str = "auto"
    names: tuple[str, ...] | None = None
    parallel: bool = True
    max_calls: int | None = None  # Responses' max_tool_calls


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: a function's JSON arguments, or a custom tool's input text."""

    id: str
    name: str
    arguments: str  # JSON text for functions; the input text for custom tools
    custom: bool = False


def new_call_id(prefix: str = "call_") -> str:
    return prefix + uuid.uuid4().hex[:24]


def check_tools(tools: list[Tool], name_path: str, schema_path: str) -> list[Tool]:
    """`tools` with valid, distinct names and object schemas; a 400 naming the field
    otherwise (`name_path` and `schema_path` are formats of the tool's `index`)."""
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if not TOOL_NAME.match(tool.name):
            raise invalid(name_path.format(index=index), f"the tool name {tool.name!r} must be 1 to 64 letters, "
                                                         "digits, underscores or dashes")
        if tool.name in seen:
            raise invalid(name_path.format(index=index), f"two tools are named {tool.name!r}")
        if tool.parameters is not None and tool.parameters.get("type", "object") != "object":
            raise invalid(schema_path.format(index=index), "a function's parameters must be a JSON Schema of "
                                                           "type object")
        seen.add(tool.name)
    return tools


def callable_tools(tools: list[Tool], choice: ToolChoice, param: str) -> list[Tool]:
    """The tools the answer may call under `choice` (every tool unless it names some)."""
    if choice.names is None:
        return tools
    known = {tool.name for tool in tools}
    for name in choice.names:
        if name not in known:
            raise invalid(param, f"the tool choice names {name!r}, which is not among the tools")
    return [tool for tool in tools if tool.name in choice.names]
