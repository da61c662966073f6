"""What the chat asks of a source of replies (remote.py: a server; local.py: an engine in this process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol

from api.terminal.session import ChatSession


class Delta(NamedTuple):
    """The newly generated text of a reply: the model's thinking and its answer, apart."""

    reasoning: str = ""
    content: str = ""


class ChatError(Exception):
    """A reply that could not be had (the server refused it or is unreachable), said in one line."""


class Transport(Protocol):
    def describe(self) -> str:
        """What the chat talks to, for its first line."""

    def stream(self, session: ChatSession) -> Iterator[Delta]:
        """The reply to `session.conversation()`, as it is generated. Raises ChatError when it
        cannot be had. A KeyboardInterrupt while it runs stops the generation (the request is
        aborted before the interrupt propagates)."""
