"""Reasoning in Responses: the model's thinking as a `reasoning` output item, whole or streamed.

An answer from a model that thought starts with one `reasoning` item (`rs_...`): no
summary (none is generated), and its text as one `reasoning_text` content part. Streamed,
the item opens at the first thinking text and closes as the answer begins (or as the
stream ends):

    response.output_item.added                    the reasoning item, in_progress
    response.content_part.added                   its reasoning_text part, empty
    response.reasoning_text.delta ...             the thinking as it comes
    response.reasoning_text.done, response.content_part.done, response.output_item.done

Output logprobs (`include`) belong to the answer's text, so the thinking section's tokens,
which all come first, are left out of them (`answer_logprobs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from api.core.openai import obfuscation_padding

Json = dict[str, Any]
T = TypeVar("T")


def reasoning_item(item_id: str, text: str, status: str) -> Json:
    return {"id": item_id, "type": "reasoning", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}] if status != "in_progress" else []}


def answer_logprobs(logprobs: Sequence[T], num_reasoning_tokens: int) -> list[T]:
    """The logprobs of the answer's tokens: those after the thinking section's."""
    return list(logprobs[num_reasoning_tokens:])


class Writer(Protocol):
    """What the stream's writer (api/responses/render.py) does for the reasoning's events."""

    items: list[Json]
    include_obfuscation: bool

    def event(self, event_type: str, **fields: Any) -> Json: ...


class ReasoningEvents:
    """The reasoning item of one streamed answer (see the module docstring)."""

    def __init__(self, writer: Writer, item_id: str) -> None:
        self.writer = writer
        self.item_id = item_id
        self.text = ""
        self.open = False
        self.output_index = 0

    def place(self) -> Json:
        return {"item_id": self.item_id, "output_index": self.output_index, "content_index": 0}

    def feed(self, text: str) -> list[Json]:
        """The events for the next piece of the thinking."""
        events = [] if self.open else self.start()
        self.text += text
        delta = self.writer.event("response.reasoning_text.delta", **self.place(), delta=text)
        if self.writer.include_obfuscation:
            delta["obfuscation"] = obfuscation_padding()
        return [*events, delta]

    def start(self) -> list[Json]:
        self.open = True
        self.output_index = len(self.writer.items)
        return [self.writer.event("response.output_item.added", output_index=self.output_index,
                                  item=reasoning_item(self.item_id, "", "in_progress")),
                self.writer.event("response.content_part.added", **self.place(),
                                  part={"type": "reasoning_text", "text": ""})]

    def close(self) -> list[Json]:
        """The events that finish the item (none when it is not open)."""
        if not self.open:
            return []
        self.open = False
        item = reasoning_item(self.item_id, self.text, "completed")
        self.writer.items.append(item)
        return [self.writer.event("response.reasoning_text.done", **self.place(), text=self.text),
                self.writer.event("response.content_part.done", **self.place(), part=item["content"][0]),
                self.writer.event("response.output_item.done", output_index=self.output_index, item=item)]
