"""Tool calls read back out of the answer's text, whole or while it streams.

The grammar (api/core/tool_grammar.py) made the text follow its format exactly, so reading
it needs no guessing: the content is the text before the format's trigger, and each call is
its opening, the tool's name, and the arguments, a JSON object whose end the standard JSON
decoder finds (or a custom tool's input, up to the call's close).

Streaming parses the text received so far on every chunk and sends what is new: content,
then per call its id and name once the name is complete, then argument fragments. The
arguments of a prefix of the text are a prefix of the final arguments (a JSON object is
never complete before its closing brace, and the text after it is not arguments), so the
fragments concatenate to exactly the arguments of the whole answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from api.core.tool_format import ToolFormat
from api.core.tools import ToolCall, new_call_id

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str
    custom: bool
    complete: bool


def parse_answer(text: str, fmt: ToolFormat, final: bool = True) -> tuple[str, list[ParsedCall]]:
    """(content, calls) of an answer; before the end (`final` False) the content leaves out
    a tail that could still begin the trigger."""
    start = text.find(fmt.trigger)
    if start < 0:
        return (text if final else text[:len(text) - overlap(text, fmt.trigger)]), []
    pos, calls = start + len(fmt.list_open), []
    while True:
        call, pos = read_call(text, pos, fmt, final)
        if call is None:
            break
        calls.append(call)
        if not call.complete or not text.startswith(fmt.separator, pos):
            break
        pos += len(fmt.separator)
    return text[:start], calls


def read_call(text: str, pos: int, fmt: ToolFormat, final: bool) -> tuple[ParsedCall | None, int]:
    """The call at `pos` and where the text after it begins (None until its name is complete)."""
    custom = bool(fmt.custom_open) and text.startswith(fmt.custom_open, pos)
    opener = fmt.custom_open if custom else fmt.call_open
    if not text.startswith(opener, pos):
        return None, pos
    name_end = text.find('"', pos + len(opener))  # names are letters, digits, _ and -
    if name_end < 0:
        return None, pos
    name = text[pos + len(opener):name_end]
    body = name_end + len(fmt.custom_after_name if custom else fmt.after_name)
    if len(text) < body:
        return ParsedCall(name, "", custom, False), len(text)
    if custom:
        return read_input(text, body, name, fmt, final)
    try:
        _, end = _DECODER.raw_decode(text, body)
    except json.JSONDecodeError:
        return ParsedCall(name, text[body:], False, False), len(text)
    return ParsedCall(name, text[body:end], False, True), end + len(fmt.call_close)


def read_input(text: str, body: int, name: str, fmt: ToolFormat, final: bool) -> tuple[ParsedCall, int]:
    """A custom tool's input: the text up to the call's close."""
    close = text.find(fmt.custom_close, body)
    if close >= 0:
        return ParsedCall(name, text[body:close], True, True), close + len(fmt.custom_close)
    held = 0 if final else overlap(text, fmt.custom_close)
    return ParsedCall(name, text[body:len(text) - held], True, False), len(text)


def overlap(text: str, marker: str) -> int:
    """The length of the longest tail of `text` that begins `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def answer_calls(text: str, fmt: ToolFormat) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a whole answer, each call with a new id."""
    content, calls = parse_answer(text, fmt)
    return content, [ToolCall(new_call_id(), call.name, call.arguments, call.custom) for call in calls]


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    call: ToolCall  # its id and name; arguments empty


@dataclass(frozen=True)
class ArgumentsDelta:
    index: int
    text: str


@dataclass
class ToolCallStream:
    """Turns the answer's text, chunk by chunk, into content and tool-call deltas."""

    fmt: ToolFormat
    text: str = ""
    content_sent: int = 0
    calls: list[ToolCall] = field(default_factory=list)  # started calls, arguments as sent so far
    parsed: list[ParsedCall] = field(default_factory=list)  # the calls as last read (each one's `complete`)

    def feed(self, chunk: str, final: bool = False) -> list[ContentDelta | CallStart | ArgumentsDelta]:
        self.text += chunk
        content, parsed = parse_answer(self.text, self.fmt, final)
        self.parsed = parsed
        deltas: list[ContentDelta | CallStart | ArgumentsDelta] = []
        if len(content) > self.content_sent:
            deltas.append(ContentDelta(content[self.content_sent:]))
            self.content_sent = len(content)
        for index, call in enumerate(parsed):
            if index == len(self.calls):
                self.calls.append(ToolCall(new_call_id(), call.name, "", call.custom))
                deltas.append(CallStart(index, self.calls[index]))
            sent = self.calls[index]
            if len(call.arguments) > len(sent.arguments):
                deltas.append(ArgumentsDelta(index, call.arguments[len(sent.arguments):]))
                self.calls[index] = ToolCall(sent.id, sent.name, call.arguments, sent.custom)
        return deltas
