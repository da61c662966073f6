"""Tools and earlier tool calls in the prompt.

A chat template that renders tools itself (its source uses `tools` and one of the formats of
api/core/tool_format.py) gets them as the `tools` variable, in the Hugging Face convention:
`{"type": "function", "function": {name, description, parameters}}`, with earlier calls on
assistant messages as `tool_calls` (arguments as objects) and results as `tool` messages.

Any other template gets Flint's default, documented in the README: the system message ends
with `DEFAULT_PREAMBLE` listing the tools, earlier calls are written into the assistant's
text in the Hermes format, and each tool result becomes a user message wrapped in
`<tool_response>` tags (a template that knows no tools knows no `tool` role either).
"""

from __future__ import annotations

import json
from typing import Any

from api.core.tool_format import DEFAULT, ToolFormat, template_format
from api.core.tools import Tool

DEFAULT_PREAMBLE = """# Tools

You may call one or more tools to answer. They are described in JSON inside <tools></tools>:
<tools>
{tools}
</tools>

To call a function, write its name and arguments as a JSON object inside <tool_call></tool_call> tags:
<tool_call>
{{"name": <function-name>, "arguments": <arguments-object>}}
</tool_call>"""
CUSTOM_PREAMBLE = """
To use a custom tool, write its input as plain text:
<tool_call name="<tool-name>">
<input>
</tool_call>"""


def answer_format(template: str | None) -> ToolFormat:
    """The format calls are written in for this chat template."""
    return template_format(template) or DEFAULT


def tool_conversation(messages: list[dict[str, Any]], tools: list[Tool] | None,
                      template: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages with the tools and earlier calls in place, and the template variables."""
    if template_format(template) is not None:
        return [native_message(message) for message in messages], ({"tools": tool_specs(tools)} if tools else {})
    converted = [default_message(message) for message in messages]
    return (with_preamble(converted, tools) if tools else converted), {}


def tool_specs(tools: list[Tool]) -> list[dict[str, Any]]:
    """The tools as chat templates (and Flint's preamble) describe them."""
    specs = []
    for tool in tools:
        if tool.custom:
            spec = {"type": "custom", "custom": {"name": tool.name, "description": tool.description}}
        else:
            spec = {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                     "parameters": tool.arguments_schema}}
        specs.append(spec)
    return specs


def with_preamble(messages: list[dict[str, Any]], tools: list[Tool]) -> list[dict[str, Any]]:
    """The default format: the tools described at the end of the system message."""
    preamble = DEFAULT_PREAMBLE.format(tools="\n".join(json.dumps(spec) for spec in tool_specs(tools)))
    if any(tool.custom for tool in tools):
        preamble += CUSTOM_PREAMBLE
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{preamble}"}, *messages[1:]]
    return [{"role": "system", "content": preamble}, *messages]


def default_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the default format writes it: calls in the text, results as user turns."""
    if message["role"] == "tool":
        return {"role": "user", "content": f"<tool_response>\n{message['content']}\n</tool_response>"}
    calls = message.get("tool_calls")
    if not calls:
        return {key: value for key, value in message.items() if key != "tool_calls"}
    text = DEFAULT.calls_text([call_parts(call) for call in calls])
    content = f"{message['content']}\n{text}" if message.get("content") else text
    reasoning = {"reasoning_content": message["reasoning_content"]} if message.get("reasoning_content") else {}
    return {"role": message["role"], "content": content, **reasoning}


def native_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message for a template that renders calls: arguments as objects, as templates expect."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    rendered = []
    for call in calls:
        name, arguments, custom = call_parts(call)
        rendered.append({"id": call.get("id"), "type": "function",
                         "function": {"name": name, "arguments": arguments if custom else json_or_text(arguments)}})
    return {**message, "tool_calls": rendered}


def call_parts(call: dict[str, Any]) -> tuple[str, str, bool]:
    """(name, arguments or input, custom) of an earlier call in OpenAI's chat shape."""
    if call.get("type") == "custom":
        return call["custom"]["name"], call["custom"].get("input", ""), True
    function = call["function"]
    return function["name"], function.get("arguments") or "{}", False


def json_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
