"""The content blocks of a reply that may call tools: `text`, then one `tool_use` per call.

The answer's text is read by api/core/tool_parser.py. The text before the calls (if any) is
a `text` block; each call is a `tool_use` block with a new `toolu_` id, the tool's name and
its `input`, the parsed arguments. A reply that ends naturally with calls stops with
`tool_use`; one cut by max_tokens keeps `max_tokens`.

Streamed, each block is content_block_start, its deltas (`text_delta`, or `input_json_delta`
fragments of the input's JSON, as they are generated) and content_block_stop. The fragments
concatenate to exactly the JSON text of the whole reply's `input`. A call cut by max_tokens
cannot be whole: the whole reply leaves its `tool_use` block out (its input is not JSON yet),
while a stream has sent its fragments already and closes its block where it was cut.
"""

from __future__ import annotations

import json

import pydantic

from api.core.tool_format import ToolFormat
from api.core.tool_parser import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream, parse_answer
from api.core.tools import new_call_id
from generated.flint import (
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    InputJsonDelta,
    TextBlock,
    TextDelta,
    ToolUseBlock,
)

CALL_ID_PREFIX = "toolu_"


def answer_blocks(text: str, fmt: ToolFormat | None) -> tuple[list[TextBlock | ToolUseBlock], bool]:
    """The blocks of a whole reply, and whether it holds calls. Without a call format (no
    tools, or `tool_choice: none`) the reply is its text."""
    if fmt is None:
        return [TextBlock(type="text", text=text)], False
    content, calls = parse_answer(text, fmt)
    blocks: list[TextBlock | ToolUseBlock] = [TextBlock(type="text", text=content)] if content else []
    blocks += [ToolUseBlock(type="tool_use", id=new_call_id(CALL_ID_PREFIX), name=call.name,
                            input=json.loads(call.arguments)) for call in calls if call.complete]
    called = len(blocks) > bool(content)
    return blocks or [TextBlock(type="text", text="")], called


class StreamBlocks:
    """One streamed reply's content blocks, as the events that open, fill and close them."""

    def __init__(self, fmt: ToolFormat | None) -> None:
        self.calls = ToolCallStream(fmt) if fmt is not None else None
        self.index = -1  # the latest block's
        self.open = False
        self.called = False

    def start(self) -> list[pydantic.BaseModel]:
        """The events before any text: a reply without calls is one text block, open at once."""
        return [] if self.calls is not None else self.open_block(TextBlock(type="text", text=""))

    def feed(self, text: str, final: bool) -> list[pydantic.BaseModel]:
        """The events for the next piece of the reply's text (`final`: its last)."""
        if self.calls is None:
            return [self.delta(TextDelta(type="text_delta", text=text))] if text else []
        events: list[pydantic.BaseModel] = []
        for item in self.calls.feed(text, final):
            events += self.item_events(item)
        return events

    def item_events(self, item: ContentDelta | CallStart | ArgumentsDelta) -> list[pydantic.BaseModel]:
        if isinstance(item, ContentDelta):  # the calls' text follows all content
            opened = [] if self.open else self.open_block(TextBlock(type="text", text=""))
            return [*opened, self.delta(TextDelta(type="text_delta", text=item.text))]
        if isinstance(item, CallStart):
            self.called = True
            return self.open_block(ToolUseBlock(type="tool_use", id=new_call_id(CALL_ID_PREFIX), name=item.call.name,
                                                input={}))
        return [self.delta(InputJsonDelta(type="input_json_delta", partial_json=item.text))]

    def finish(self) -> list[pydantic.BaseModel]:
        """The events that close the reply's content (an empty reply is one empty text block)."""
        opened = self.open_block(TextBlock(type="text", text="")) if self.index < 0 else []
        return [*opened, *self.close()]

    def open_block(self, block: TextBlock | ToolUseBlock) -> list[pydantic.BaseModel]:
        closed = self.close()
        self.index += 1
        self.open = True
        return [*closed, ContentBlockStartEvent(type="content_block_start", index=self.index, content_block=block)]

    def close(self) -> list[pydantic.BaseModel]:
        if not self.open:
            return []
        self.open = False
        return [ContentBlockStopEvent(type="content_block_stop", index=self.index)]

    def delta(self, delta: TextDelta | InputJsonDelta) -> ContentBlockDeltaEvent:
        return ContentBlockDeltaEvent(type="content_block_delta", index=self.index, delta=delta)
