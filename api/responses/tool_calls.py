"""Tool calls in Responses answers: `function_call` output items, whole or streamed.

The answer's text is read by api/core/tool_parser.py: what comes before the calls is the
assistant message (left out when the answer is calls only), and each call is one
`function_call` item after it: an `fc_...` item id, the `call_...` id a
function_call_output quotes, the name and the arguments as JSON text. A call is
`completed` when it was written to its end, `incomplete` when max_output_tokens cut it.

Streamed, the message item opens at the answer's first text, and each call is

    response.output_item.added                   the function_call, arguments "", in_progress
    response.function_call_arguments.delta ...   the arguments as they come
    response.function_call_arguments.done        the whole arguments
    response.output_item.done                    the finished item

An item is closed when the next one starts, the last at the end of the answer. The deltas
concatenate to exactly the arguments of the whole answer (api/core/tool_parser.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from api.core.openai import obfuscation_padding
from api.core.tool_format import ToolFormat
from api.core.tool_parser import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream, parse_answer
from api.core.tools import new_call_id
from api.responses.input import new_id

Json = dict[str, Any]


def call_item(call_id: str, name: str, arguments: str, status: str) -> Json:
    return {"id": new_id("fc"), "type": "function_call", "status": status, "arguments": arguments,
            "call_id": call_id, "name": name}


def answer_calls(text: str, fmt: ToolFormat) -> tuple[str, list[Json]]:
    """The text of a whole answer before its calls, and the calls as function_call items."""
    content, calls = parse_answer(text, fmt)
    return content, [call_item(new_call_id(), call.name, call.arguments,
                               "completed" if call.complete else "incomplete") for call in calls]


def answer_items(text: str, fmt: ToolFormat, status: str, message: Callable[[str, str], Json]) -> list[Json]:
    """The output items of a whole answer: `message(text, status)` of its text (left out when
    the answer is calls only), then its calls."""
    content, calls = answer_calls(text, fmt)
    return ([message(content, "completed" if calls else status)] if content or not calls else []) + calls


class MessageEvents(Protocol):
    """What the stream's writer (api/responses/render.py) does for the calls' events."""

    items: list[Json]  # the output items closed so far
    message_open: bool
    include_obfuscation: bool

    def event(self, event_type: str, **fields: Any) -> Json: ...
    def open_message(self) -> list[Json]: ...
    def text_delta(self, text: str, logprobs: list[Json]) -> Json: ...
    def close_message(self, status: str) -> list[Json]: ...


class CallEvents:
    """The events of a streamed answer that may call tools (see the module docstring)."""

    def __init__(self, writer: MessageEvents, fmt: ToolFormat) -> None:
        self.writer = writer
        self.stream = ToolCallStream(fmt)
        self.call: Json | None = None  # the function_call item being written
        self.output_index = 0  # the open call's

    def feed(self, text: str, final: bool) -> list[Json]:
        events: list[Json] = []
        for delta in self.stream.feed(text, final):
            if isinstance(delta, ContentDelta):
                if not self.writer.message_open:
                    events += self.writer.open_message()
                events.append(self.writer.text_delta(delta.text, []))
            elif isinstance(delta, CallStart):
                events += self.close_item("completed")  # the message, or the call before
                events += self.start(delta)
            else:
                events.append(self.arguments_delta(delta))
        return events

    def start(self, delta: CallStart) -> list[Json]:
        self.call = call_item(delta.call.id, delta.call.name, "", "in_progress")
        self.output_index = len(self.writer.items)
        return [self.writer.event("response.output_item.added", output_index=self.output_index, item=self.call)]

    def arguments_delta(self, delta: ArgumentsDelta) -> Json:
        self.call["arguments"] += delta.text
        event = self.writer.event("response.function_call_arguments.delta", item_id=self.call["id"],
                                  output_index=self.output_index, delta=delta.text)
        if self.writer.include_obfuscation:
            event["obfuscation"] = obfuscation_padding()
        return event

    def close(self, status: str) -> list[Json]:
        """The closing events of the last item; an answer with neither text nor calls is
        one empty message."""
        if self.call is not None:
            return self.close_item("completed" if self.stream.parsed[-1].complete else "incomplete")
        if not self.writer.message_open and all(item["type"] == "reasoning" for item in self.writer.items):
            return self.writer.open_message() + self.writer.close_message(status)
        return self.close_item(status)

    def close_item(self, status: str) -> list[Json]:
        """Close the open item: the message, or a call."""
        if self.call is None:
            return self.writer.close_message(status) if self.writer.message_open else []
        item, self.call = {**self.call, "status": status}, None
        self.writer.items.append(item)
        place = {"item_id": item["id"], "output_index": self.output_index}
        return [self.writer.event("response.function_call_arguments.done", **place, name=item["name"],
                                  arguments=item["arguments"]),
                self.writer.event("response.output_item.done", output_index=self.output_index, item=item)]
