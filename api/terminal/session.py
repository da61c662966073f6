"""A chat's state: the conversation and its settings, apart from where replies come from,
and its save format (JSON: `{"system", "temperature", "max_tokens", "messages"}`)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_TEMPERATURE = 2.0  # the API's and the engine's bound
ROLES = ("user", "assistant")


@dataclass
class ChatSession:
    """The conversation so far (user and assistant turns, alternating) and the settings of
    the next request. The system prompt is kept apart, so that /reset keeps it."""

    system: str | None = None
    temperature: float | None = None  # None: the server's (or engine's) default
    max_tokens: int | None = None  # None: until the model stops or the context is full
    messages: list[dict[str, str]] = field(default_factory=list)

    def conversation(self) -> list[dict[str, str]]:
        """The messages of the next request: the system prompt first, when there is one."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + self.messages

    def reset(self) -> None:
        self.messages.clear()

    def restore(self, other: ChatSession) -> None:
        """Take `other`'s conversation and settings (what /load does)."""
        self.system, self.temperature, self.max_tokens = other.system, other.temperature, other.max_tokens
        self.messages = list(other.messages)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path) -> ChatSession:
        """The chat saved in `path`; OSError when it cannot be read, ValueError (saying what
        is wrong) when it is not a saved chat."""
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON ({error})") from None
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: Any) -> ChatSession:
        """A session from its saved form. A leading system message in `messages` (the
        OpenAI shape) is taken as the system prompt."""
        if not isinstance(data, dict):
            raise ValueError("a saved chat is a JSON object")
        messages = checked_messages(data.get("messages", []))
        system = data.get("system")
        if messages and messages[0]["role"] == "system":
            system, messages = messages[0]["content"], messages[1:]
        if system is not None and not isinstance(system, str):
            raise ValueError("`system` must be a string")
        if any(message["role"] == "system" for message in messages):
            raise ValueError("a system message may only come first")
        temperature, max_tokens = data.get("temperature"), data.get("max_tokens")
        return cls(system=system or None,
                   temperature=None if temperature is None else checked_temperature(temperature),
                   max_tokens=None if max_tokens is None else checked_max_tokens(max_tokens),
                   messages=messages)


def checked_messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list):
        raise ValueError("`messages` must be a list")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (*ROLES, "system") \
                or not isinstance(message.get("content"), str):
            raise ValueError(f"message {index} must be an object with a `role` (user or assistant) "
                             "and a text `content`")
        checked.append({"role": message["role"], "content": message["content"]})
    return checked


def parsed(value: Any, kind: type) -> Any:
    """`value` read as `kind` when it is text (None when it does not read), else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return kind(value)
    except ValueError:
        return None


def checked_temperature(value: Any) -> float:
    """`value` (a number, or its text) as a temperature from 0 to MAX_TEMPERATURE, else ValueError."""
    number = parsed(value, float)
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) \
            or not 0 <= number <= MAX_TEMPERATURE:
        raise ValueError(f"the temperature must be a number from 0 to {MAX_TEMPERATURE:g}, not {value!r}")
    return float(number)


def checked_max_tokens(value: Any) -> int:
    """`value` (an integer, or its text) as a reply's token limit, at least 1, else ValueError."""
    number = parsed(value, int)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"the token limit must be a positive integer, not {value!r}")
    return number
