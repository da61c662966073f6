"""The content blocks of a reply that may call tools: `text`, then one `tool_use` per call.

The answer's text is read by api/core/tool_parser.py. The text before the calls (if any) is
a `text` block; each call is a `tool_use` block with a new `toolu_` id, the tool's name and
its `input`, the parsed arguments. A reply that ends naturally with calls stops with
`tool_use`; one cut by max_tokens keeps `max_tokens`.

Streamed, each block is content_block_start, its deltas (`text_delta`, or `input_json_delta`
fragments of the input's JSON, as they are generated) and content_block_stop. The fragments
concatenate to exactly the JSON text of the whole reply's `input`. A reply that thinks
starts with a `thinking` block: `thinking_delta`s, then its `signature_delta` just before
it stops (api/messages/thinking.py); the text block then opens at the first text. A call cut by max_tokens
cannot be whole: the whole reply leaves its `tool_use` block out (its input is not JSON yet),
while a stream has sent its fragments already and closes its block where it was cut.
"""

from __future__ import annotations

import json

import pydantic

from api.core.tool_format import ToolFormat
from api.core.tool_parser import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream, parse_answer
from api.core.tools import new_call_id
from api.messages.thinking import signature
from generated.flint import (
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    InputJsonDelta,
    SignatureDelta,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
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

    def __init__(self, fmt: ToolFormat | None, signing_key: bytes | None = None) -> None:
        """`signing_key`: the reply may think (its thinking block signed with the key)."""
        self.calls = ToolCallStream(fmt) if fmt is not None else None
        self.signing_key = signing_key
        self.index = -1  # the latest block's
        self.open = False
        self.called = False
        self.answered = False  # a text or tool_use block has opened
        self.thinking: str | None = None  # the open thinking block's text so far

    def start(self) -> list[pydantic.BaseModel]:
        """The events before any text: a reply without calls or thinking is one text block,
        open at once."""
        if self.calls is not None or self.signing_key is not None:
            return []
        return self.open_block(TextBlock(type="text", text=""))

    def think(self, text: str) -> list[pydantic.BaseModel]:
        """The events for the next piece of the reply's thinking."""
        opened = [] if self.thinking is not None else self.open_block(ThinkingBlock(type="thinking", thinking="",
                                                                                     signature=""))
        self.thinking = (self.thinking or "") + text
        return [*opened, self.delta(ThinkingDelta(type="thinking_delta", thinking=text))]

    def feed(self, text: str, final: bool) -> list[pydantic.BaseModel]:
        """The events for the next piece of the reply's text (`final`: its last)."""
        if self.calls is None:
            if not text:
                return []
            opened = [] if self.open and self.thinking is None else self.open_block(TextBlock(type="text", text=""))
            return [*opened, self.delta(TextDelta(type="text_delta", text=text))]
        events: list[pydantic.BaseModel] = []
        for item in self.calls.feed(text, final):
            events += self.item_events(item)
        return events

    def item_events(self, item: ContentDelta | CallStart | ArgumentsDelta) -> list[pydantic.BaseModel]:
        if isinstance(item, ContentDelta):  # the calls' text follows all content
            opened = [] if self.open and self.thinking is None else self.open_block(TextBlock(type="text", text=""))
            return [*opened, self.delta(TextDelta(type="text_delta", text=item.text))]
        if isinstance(item, CallStart):
            self.called = True
            return self.open_block(ToolUseBlock(type="tool_use", id=new_call_id(CALL_ID_PREFIX), name=item.call.name,
                                                input={}))
        return [self.delta(InputJsonDelta(type="input_json_delta", partial_json=item.text))]

    def finish(self) -> list[pydantic.BaseModel]:
        """The events that close the reply's content (an empty reply is one empty text block)."""
        opened = [] if self.answered else self.open_block(TextBlock(type="text", text=""))
        return [*opened, *self.close()]

    def open_block(self, block: TextBlock | ToolUseBlock | ThinkingBlock) -> list[pydantic.BaseModel]:
        closed = self.close()
        self.index += 1
        self.open = True
        self.answered = self.answered or not isinstance(block, ThinkingBlock)
        return [*closed, ContentBlockStartEvent(type="content_block_start", index=self.index, content_block=block)]

    def close(self) -> list[pydantic.BaseModel]:
        """The open block's end: a thinking block's signature, then its stop."""
        if not self.open:
            return []
        signed = []
        if self.thinking is not None:
            signed = [self.delta(SignatureDelta(type="signature_delta",
                                                signature=signature(self.signing_key, self.thinking)))]
            self.thinking = None
        self.open = False
        return [*signed, ContentBlockStopEvent(type="content_block_stop", index=self.index)]

    def delta(self, delta: TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta) -> ContentBlockDeltaEvent:
        return ContentBlockDeltaEvent(type="content_block_delta", index=self.index, delta=delta)
