"""The chat request's tool fields, read into the shared shapes of api/core/tools.py.

- `tools`: function tools (`parameters`, `strict`) and custom tools (input as text, or
  constrained by a Lark grammar or a regex);
- `tool_choice`: "none", "auto", "required", a named function or custom tool, or
  `allowed_tools` (a subset, in mode auto or required);
- `parallel_tool_calls` (default true);
- the deprecated `functions` and `function_call`, answered in their own deprecated shape
  (`message.function_call`, finish_reason "function_call"), one call at most.
With tools and no tool_choice, the model may call them ("auto"); with none, it answers text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.core.errors import invalid
from api.core.tools import Tool, ToolChoice, callable_tools, check_tools
from engine.text.grammar import Grammar

SYNTAXES = {"lark": "lark", "regex": "regex"}


@dataclass(frozen=True)
class ChatTools:
    """The tools a chat answer may call, and how."""

    tools: list[Tool]  # those callable under the choice
    choice: ToolChoice
    deprecated_functions: bool = False  # answered as `function_call`
    given: tuple[Tool, ...] = ()  # every tool of the request, in its order


def chat_tools(fields: dict[str, Any]) -> ChatTools | None:
    """The request's tools and choice; None when the answer is plain text."""
    deprecated = bool(fields.get("functions")) or isinstance(fields.get("function_call"), dict)
    if deprecated and (fields.get("tools") or fields.get("tool_choice") not in (None, "none", "auto")):
        raise invalid("functions", "`functions` and `function_call` are the deprecated forms of `tools` and "
                                   "`tool_choice`: give one pair or the other")
    if deprecated:
        return deprecated_tools(fields)
    tools = [read_tool(tool) for tool in fields.get("tools") or []]
    check_tools(tools, "tools.[{index}].function.name", "tools.[{index}].function.parameters")
    choice = read_choice(fields.get("tool_choice"), bool(tools), fields.get("parallel_tool_calls"))
    if choice.mode == "none" or not tools:
        if choice.mode == "required":
            raise invalid("tool_choice", "`tool_choice` requires a tool call, but no tools are given")
        return None
    return ChatTools(callable_tools(tools, choice, "tool_choice"), choice, given=tuple(tools))


def read_tool(tool: dict[str, Any]) -> Tool:
    if tool["type"] == "function":
        function = tool["function"]
        return Tool(function["name"], function.get("description") or "", function.get("parameters"),
                    bool(function.get("strict")))
    custom = tool["custom"]
    return Tool(custom["name"], custom.get("description") or "", custom=True,
                input_grammar=custom_format(custom.get("format")))


def custom_format(fmt: dict[str, Any] | None) -> Grammar | None:
    """A custom tool's input grammar (None: free text)."""
    if fmt is None or fmt.get("type") == "text":
        return None
    grammar = fmt["grammar"]
    return Grammar(SYNTAXES[grammar["syntax"]], grammar["definition"])


def read_choice(value: Any, has_tools: bool, parallel: bool | None) -> ToolChoice:
    """`tool_choice` as a ToolChoice (the default: auto with tools, none without)."""
    parallel = parallel is not False
    if value is None:
        return ToolChoice("auto" if has_tools else "none", parallel=parallel)
    if isinstance(value, str):
        return ToolChoice(value, parallel=parallel)
    if value["type"] == "allowed_tools":
        allowed = value["allowed_tools"]
        names = tuple(tool_name(tool) for tool in allowed["tools"])
        return ToolChoice(allowed["mode"], names=names, parallel=parallel)
    return ToolChoice("required", names=(tool_name(value),), parallel=parallel)


def tool_name(reference: dict[str, Any]) -> str:
    """The name in `{"type": "function", "function": {"name"}}` or its custom twin."""
    kind = reference.get("type", "function")
    return reference[kind]["name"]


def deprecated_tools(fields: dict[str, Any]) -> ChatTools | None:
    """`functions` and `function_call`, as tools with at most one call."""
    functions = [Tool(f["name"], f.get("description") or "", f.get("parameters"))
                 for f in fields.get("functions") or []]
    check_tools(functions, "functions.[{index}].name", "functions.[{index}].parameters")
    call = fields.get("function_call")
    if call == "none" or not functions:
        if isinstance(call, dict):
            raise invalid("function_call", "`function_call` names a function, but no functions are given")
        return None
    choice = ToolChoice("required", names=(call["name"],), parallel=False) if isinstance(call, dict) \
        else ToolChoice("auto", parallel=False)
    return ChatTools(callable_tools(functions, choice, "function_call"), choice, deprecated_functions=True,
                     given=tuple(functions))
