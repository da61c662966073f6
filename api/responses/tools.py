"""The Responses request's tool fields, read into the shared shapes of api/core/tools.py.

- `tools`: function tools (`name`, `description`, `parameters`, `strict`, which the spec
  defaults to true); the spec has no other tool type, so any other is a schema violation;
- `tool_choice`: "none", "auto", "required" or `{"type": "function", "name"}`;
- `parallel_tool_calls` (default true) and `max_tool_calls` (at most that many calls).
With tools and no tool_choice, the model may call them ("auto"); with none, it answers text.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.core.errors import invalid
from api.core.tools import Tool, ToolChoice, callable_tools, check_tools
from generated.flint import CreateResponseRequest, FunctionTool, ResponseToolChoice

NAME_PATH = "tools.[{index}].name"
SCHEMA_PATH = "tools.[{index}].parameters"


@dataclass(frozen=True)
class ResponseTools:
    """The tools a response may call, and how."""

    tools: list[Tool]  # those callable under the choice
    choice: ToolChoice
    given: tuple[Tool, ...] = ()  # every tool of the request, in its order


def response_tools(request: CreateResponseRequest) -> ResponseTools | None:
    """The request's tools and choice; None when the answer is plain text."""
    tools = check_tools([read_tool(tool) for tool in request.tools or []], NAME_PATH, SCHEMA_PATH)
    choice = read_choice(request.tool_choice, bool(tools), request.parallel_tool_calls, request.max_tool_calls)
    if choice.mode == "none" or not tools:
        if choice.mode == "required":
            raise invalid("tool_choice", "`tool_choice` requires a tool call, but no tools are given")
        return None
    return ResponseTools(callable_tools(tools, choice, "tool_choice"), choice, given=tuple(tools))


def read_tool(tool: FunctionTool) -> Tool:
    return Tool(tool.name, tool.description or "", tool.parameters, tool.strict is not False)


def read_choice(value: ResponseToolChoice | None, has_tools: bool, parallel: bool | None,
                max_calls: int | None) -> ToolChoice:
    """`tool_choice` as a ToolChoice (the default: auto with tools, none without)."""
    parallel = parallel is not False
    choice = getattr(value, "root", value)
    if choice is None:
        return ToolChoice("auto" if has_tools else "none", parallel=parallel, max_calls=max_calls)
    if isinstance(choice, str):  # a ResponseToolChoiceMode (a StrEnum)
        return ToolChoice(str(choice), parallel=parallel, max_calls=max_calls)
    return ToolChoice("required", names=(choice.name,), parallel=parallel, max_calls=max_calls)
