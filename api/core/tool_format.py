"""How tool calls are written as text: the formats Flint constrains and parses.

A format fixes the exact text of a call, so that the grammar (api/core/tool_grammar.py)
and the parser (api/core/tool_parser.py) agree byte for byte:

    LIST_OPEN CALL (SEPARATOR CALL)* LIST_CLOSE
    CALL = call_open NAME '", "<arguments_key>": ' ARGUMENTS call_close       (a function)
         | custom_open NAME custom_after_name INPUT custom_close               (a custom tool)

`trigger` is the text that starts the calls; under `tool_choice: auto` the model writes
free text until it writes the trigger, and from there on only valid calls.

The format comes from the model's chat template when the template renders tools: Hermes
and Qwen (`<tool_call>` JSON), Llama 3 (bare JSON with "parameters") and Mistral
(`[TOOL_CALLS]` and a JSON list). Other templates get Flint's default, which is the Hermes
format with the tools described in the system message (api/core/tool_prompt.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolFormat:
    name: str
    trigger: str
    call_open: str  # up to the function's name
    arguments_key: str
    call_close: str  # after the arguments
    separator: str
    list_open: str = ""
    list_close: str = ""
    custom_open: str | None = None  # None: the format has no custom tools
    custom_after_name: str = ""
    custom_close: str = ""

    @property
    def after_name(self) -> str:
        return f'", "{self.arguments_key}": '

    def call_text(self, name: str, arguments: str, custom: bool = False) -> str:
        """One call written in this format (to render earlier calls in a conversation)."""
        if custom:
            return f"{self.custom_open}{name}{self.custom_after_name}{arguments}{self.custom_close}"
        return f"{self.call_open}{name}{self.after_name}{arguments}{self.call_close}"

    def calls_text(self, calls: list[tuple[str, str, bool]]) -> str:
        return self.list_open + self.separator.join(self.call_text(*call) for call in calls) + self.list_close


HERMES = ToolFormat(
    name="hermes", trigger="<tool_call", call_open='<tool_call>\n{"name": "', arguments_key="arguments",
    call_close="}\n</tool_call>", separator="\n", custom_open='<tool_call name="', custom_after_name='">\n',
    custom_close="\n</tool_call>")
LLAMA3_JSON = ToolFormat(
    name="llama3_json", trigger='{"name": "', call_open='{"name": "', arguments_key="parameters", call_close="}",
    separator="; ")
MISTRAL = ToolFormat(
    name="mistral", trigger="[TOOL_CALLS]", call_open='{"name": "', arguments_key="arguments", call_close="}",
    separator=", ", list_open="[TOOL_CALLS][", list_close="]")
DEFAULT = HERMES


def template_format(template: str | None) -> ToolFormat | None:
    """The call format of a chat template that renders tools itself (None: it does not)."""
    if not template or "tools" not in template:
        return None
    if "<tool_call>" in template:
        return HERMES
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<|python_tag|>" in template or "ipython" in template:
        return LLAMA3_JSON
    return None
