"""The chat's slash commands: each reads its argument, changes the session, and says what it did."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from api.terminal.session import ChatSession, checked_max_tokens, checked_temperature


@dataclass(frozen=True)
class Outcome:
    """What a command has to say, whether that is an error (a bad value, a file that
    cannot be read), and whether the chat ends."""

    message: str = ""
    failed: bool = False
    quit: bool = False


def failure(message: str) -> Outcome:
    return Outcome(message, failed=True)


def set_system(session: ChatSession, text: str) -> Outcome:
    if text:
        session.system = text
        return Outcome(f"system prompt: {text}")
    return Outcome(f"system prompt: {session.system}" if session.system else "no system prompt (/system TEXT sets one)")


def set_temperature(session: ChatSession, text: str) -> Outcome:
    if text:
        try:
            session.temperature = checked_temperature(text)
        except ValueError as error:
            return failure(str(error))
    return Outcome(f"temperature: {'the default' if session.temperature is None else f'{session.temperature:g}'}")


def set_max_tokens(session: ChatSession, text: str) -> Outcome:
    if text:
        try:
            session.max_tokens = checked_max_tokens(text)
        except ValueError as error:
            return failure(str(error))
    limit = session.max_tokens
    return Outcome(f"token limit per reply: {'none (the context window)' if limit is None else limit}")


def reset(session: ChatSession, _: str) -> Outcome:
    session.reset()
    return Outcome("conversation cleared" + (" (the system prompt is kept)" if session.system else ""))


def save(session: ChatSession, text: str) -> Outcome:
    if not text:
        return failure("usage: /save FILE")
    path = Path(text).expanduser()
    try:
        session.save(path)
    except OSError as error:
        return failure(f"cannot save to {path}: {error.strerror or error}")
    return Outcome(f"saved {len(session.messages)} messages to {path}")


def load(session: ChatSession, text: str) -> Outcome:
    if not text:
        return failure("usage: /load FILE")
    path = Path(text).expanduser()
    try:
        session.restore(ChatSession.load(path))
    except OSError as error:
        return failure(f"cannot read {path}: {error.strerror or error}")
    except ValueError as error:
        return failure(f"{path} is not a saved chat: {error}")
    return Outcome(f"loaded {len(session.messages)} messages from {path}")


def show_help(_: ChatSession, __: str) -> Outcome:
    return Outcome(HELP)


def quit_chat(_: ChatSession, __: str) -> Outcome:
    return Outcome(quit=True)


COMMANDS: dict[str, Callable[[ChatSession, str], Outcome]] = {
    "/system": set_system, "/temperature": set_temperature, "/max-tokens": set_max_tokens, "/reset": reset,
    "/save": save, "/load": load, "/help": show_help, "/quit": quit_chat, "/exit": quit_chat,
}

HELP = """\
/system [TEXT]       set the system prompt (without TEXT: show it)
/temperature [T]     set the sampling temperature, 0 (greedy) to 2 (without T: show it)
/max-tokens [N]      set the most tokens of a reply (without N: show it)
/reset               clear the conversation, keeping the system prompt and settings
/save FILE           write the conversation and settings to FILE as JSON
/load FILE           continue a conversation saved with /save
/help                this list
/quit, /exit         leave (Ctrl-D too)
Ctrl-C stops a reply being generated; at the prompt it discards the line, and twice in a row leaves."""


def is_command(line: str) -> bool:
    return line.startswith("/")


def run_command(line: str, session: ChatSession) -> Outcome:
    """Run the slash command `line` ("/name argument") on `session`."""
    name, _, argument = line.strip().partition(" ")
    command = COMMANDS.get(name.lower())
    if command is None:
        return failure(f"unknown command {name} (/help lists the commands)")
    return command(session, argument.strip())
