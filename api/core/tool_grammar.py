"""The grammar of an answer that may or must call tools (llguidance's Lark dialect).

    required:  start: LIST_OPEN call (SEPARATOR call)* LIST_CLOSE   (one call without parallel)
    auto:      start: TEXT | lead first_call (SEPARATOR call)* LIST_CLOSE
               lead[lazy]: TEXT TRIGGER

Under `auto` the model writes free text, and the lazy `lead` ends at the first trigger: from
there the answer is calls only. Each call's name is one of the callable tools, and its
arguments follow that tool's JSON schema (embedded with `%json`, in the compact layout of
engine/text/grammar.py; leniently when the tool is not strict, so they are still JSON). A custom
tool's input follows its Lark grammar (a side grammar), its regex, or is any text up to the
call's end.
"""

from __future__ import annotations

import json

import llguidance

from api.core.errors import invalid
from api.core.structured import enforced_schema
from api.core.tool_format import ToolFormat
from api.core.tools import Tool, ToolChoice
from engine.text.grammar import JSON_LAYOUT, Grammar

ANY_TEXT = r"/(.|\n)*/"


def tool_grammar(tools: list[Tool], choice: ToolChoice, fmt: ToolFormat, text_schema: dict | None = None) -> Grammar:
    """The grammar of an answer under `choice` that calls `tools` in format `fmt`; under
    auto, a `text_schema` (a response format) makes the answer either that JSON or calls."""
    rules, side_grammars = [], []
    for index, tool in enumerate(tools):
        rules.append(body_rule(index, tool, fmt, side_grammars))
    call_rule = "call: " + " | ".join(f"{literal(open_text(tool, fmt))} body_{i}" for i, tool in enumerate(tools))
    more = more_calls(choice, literal(fmt.separator))
    calls = f"{literal(fmt.list_open)} call {more} {literal(fmt.list_close)}"
    if choice.mode == "required":
        start = f"start: {calls}"
    elif text_schema is not None:
        start = f"start: %json {json.dumps(with_layout(text_schema))} | {calls}"
    else:
        first = "first: " + " | ".join(f"{literal(first_text(tool, fmt))} body_{i}"
                                       for i, tool in enumerate(tools))
        start = (f"start: TEXT | lead first {more} {literal(fmt.list_close)}\n"
                 f"lead[lazy]: TEXT {literal(fmt.trigger)}\n{first}")
    lark = "\n".join(["%llguidance {}", start, call_rule, *rules, f"TEXT: {ANY_TEXT}"]) + "\n"
    if not side_grammars:
        return Grammar("lark", lark)
    return Grammar("llguidance", json.dumps({"grammars": [{"lark_grammar": lark}, *side_grammars]}))


def calls_or_format(tools: list[Tool], choice: ToolChoice, fmt: ToolFormat, text_format: Grammar | None,
                    format_param: str) -> Grammar:
    """The grammar of an answer that may call `tools` and has a response format: under auto
    the answer is either the format's JSON or calls (a format that is not JSON cannot be
    combined: a 400 naming `format_param`); when a call is required the format has nothing
    to apply to."""
    if text_format is None or choice.mode != "auto":
        return tool_grammar(tools, choice, fmt)
    if text_format.kind != "json_schema":
        raise invalid(format_param, "only a JSON response format can be combined with tools")
    return tool_grammar(tools, choice, fmt, json.loads(text_format.text))


def more_calls(choice: ToolChoice, separator: str) -> str:
    """The repetition after the first call: none without parallel calls, bounded by max_calls."""
    if not choice.parallel or choice.max_calls == 1:
        return ""
    if choice.max_calls is None:
        return f"({separator} call)*"
    nested = ""
    for _ in range(choice.max_calls - 1):
        nested = f"({separator} call {nested})?"
    return nested


def open_text(tool: Tool, fmt: ToolFormat) -> str:
    return f"{fmt.custom_open if tool.custom else fmt.call_open}{tool.name}"


def first_text(tool: Tool, fmt: ToolFormat) -> str:
    """The first call's opening after the trigger that `lead` has already written."""
    full = fmt.list_open + open_text(tool, fmt)
    return full[len(fmt.trigger):]


def body_rule(index: int, tool: Tool, fmt: ToolFormat, side_grammars: list[dict]) -> str:
    """`body_<index>`: what follows the tool's name, to the end of the call."""
    if not tool.custom:
        schema = json.dumps(arguments_schema(tool))
        return f"body_{index}: {literal(fmt.after_name)} %json {schema} {literal(fmt.call_close)}"
    head = literal(fmt.custom_after_name)
    grammar = tool.input_grammar
    if grammar is None:  # any text, up to the first close
        return f"body_{index}: {head} input_{index}\ninput_{index}[lazy]: TEXT {literal(fmt.custom_close)}"
    if grammar.kind == "regex":
        return f"body_{index}: {head} /{llguidance.regex_to_lark(grammar.text)}/ {literal(fmt.custom_close)}"
    side_grammars.append({"name": f"tool_{index}", "lark_grammar": grammar.text})
    return f"body_{index}: {head} @tool_{index} {literal(fmt.custom_close)}"


def arguments_schema(tool: Tool) -> dict:
    """The tool's argument schema as it is enforced (api/core/structured.py), with the
    compact JSON layout."""
    return with_layout(enforced_schema(tool.arguments_schema, tool.strict))


def with_layout(schema: dict) -> dict:
    """A copy of `schema` that asks for engine/text/grammar.py's compact JSON layout."""
    return {**schema, "x-guidance": {**schema.get("x-guidance", {}), **JSON_LAYOUT}}


def literal(text: str) -> str:
    """A Lark string literal (JSON's escapes are Lark's); nothing for the empty string."""
    return json.dumps(text) if text else ""
