"""How the chat prints: a reply as it streams, its thinking dimmed and apart from its answer;
notes and errors on lines of their own."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from api.terminal.transport import Delta

DIM, RESET = "\x1b[2m", "\x1b[0m"


def wants_color(stream: TextIO) -> bool:
    """ANSI styles on a terminal, unless NO_COLOR (https://no-color.org) is set."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


class Screen:
    """The chat's output: replies and notes on `out`, errors on `err`."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr, color: bool | None = None) -> None:
        self.out, self.err = out, err
        self.color = wants_color(out) if color is None else color

    def say(self, text: str) -> None:
        if text:
            print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        """Something about the chat rather than of it (dimmed)."""
        if text:
            print(self.dim(text), file=self.out, flush=True)

    def error(self, text: str) -> None:
        print(f"error: {text}", file=self.err, flush=True)

    def dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.color else text

    def reply(self) -> ReplyPrinter:
        return ReplyPrinter(self)


class ReplyPrinter:
    """One reply, printed as its deltas arrive: thinking dimmed, then a blank line, then the answer."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen
        self.content = ""  # the answer so far: what the conversation keeps
        self.thinking = False  # inside the dimmed thinking
        self.at_line_start = True

    def show(self, delta: Delta) -> None:
        if delta.reasoning:
            if not self.thinking and self.screen.color:
                self.write(DIM)
            self.thinking = True
            self.write(delta.reasoning)
        if delta.content:
            if self.thinking:
                self.end_thinking()
                self.write("\n\n")
            self.content += delta.content
            self.write(delta.content)

    def end(self) -> None:
        """Close the reply: styles reset, and the cursor on a line of its own."""
        self.end_thinking()
        if not self.at_line_start:
            self.write("\n")

    def end_thinking(self) -> None:
        if self.thinking and self.screen.color:
            self.write(RESET)
        self.thinking = False

    def write(self, text: str) -> None:
        self.screen.out.write(text)
        self.screen.out.flush()
        if text and text not in (DIM, RESET):
            self.at_line_start = text.endswith("\n")
