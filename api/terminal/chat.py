"""`flint chat`: its flags, and the loop that reads a line, runs it as a command or sends it,
and streams the reply."""

from __future__ import annotations

import argparse
import os
import signal
from contextlib import closing

from api.server.serve import (EXIT_BAD_ARGUMENTS, add_compilation_cache_arguments, add_device_arguments,
                              add_download_argument)
from api.terminal.commands import Outcome, is_command, run_command
from api.terminal.screen import Screen
from api.terminal.session import ChatSession, checked_max_tokens, checked_temperature
from api.terminal.transport import ChatError, Transport

DEFAULT_URL = "http://127.0.0.1:8000"
PROMPT = ">>> "
EXIT_INTERRUPTED = 130  # the shell's status for a command ended by SIGINT

DESCRIPTION = """\
A conversation in the terminal with a running Flint server (--url), or with a model run in
this process (--local). Replies stream as they are generated; a reasoning model's thinking
is shown dimmed, before its answer, and is not sent back with the conversation."""

EPILOG = """\
commands (type /help in the chat):
  /system [TEXT]  /temperature [T]  /max-tokens [N]  /reset  /save FILE  /load FILE  /help  /quit

keys:
  Ctrl-C  while a reply is generated: stop it (the server or engine aborts the request);
          the part already shown stays in the conversation, and a reply stopped before any
          text is dropped with its question. At the prompt: discard the line; twice in a
          row: leave.
  Ctrl-D  leave (also /quit or /exit)

A request the server refuses (a wrong API key, an unreachable server, a conversation too
long for the context) is reported on one line; the question is dropped and the chat goes on."""


def add_chat_parser(commands: argparse._SubParsersAction, model_help: str) -> None:
    """The `chat` subcommand and its flags, on the `flint` command's subparsers."""
    chat = commands.add_parser("chat", help="chat with a model in the terminal", description=DESCRIPTION,
                               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    chat.add_argument("--url", default=os.environ.get("FLINT_URL") or DEFAULT_URL,
                      help=f"the server to talk to, with or without /v1 (default: $FLINT_URL, else {DEFAULT_URL})")
    chat.add_argument("--api-key", metavar="KEY", default=first_key(os.environ.get("FLINT_API_KEY")),
                      help="the server's API key, sent as a bearer token (default: the first key of $FLINT_API_KEY)")
    chat.add_argument("--model", default=None,
                      help="the served model's id (default: the first of the server's /v1/models); with "
                           f"--local, the model to run: {model_help}")
    chat.add_argument("--system", metavar="TEXT", default=None, help="the system prompt")
    chat.add_argument("--temperature", metavar="T", type=flag_type(checked_temperature), default=None,
                      help="sampling temperature, 0 (greedy) to 2 (default: the server's or engine's, 1)")
    chat.add_argument("--max-tokens", metavar="N", type=flag_type(checked_max_tokens), default=None,
                      help="most tokens of a reply (default: until the model stops or the context is full)")
    local = chat.add_argument_group("in process (--local)")
    local.add_argument("--local", "--in-process", action="store_true",
                       help="run the model in this process instead of talking to a server")
    local.add_argument("--max-model-len", metavar="N", type=int, default=2048,
                       help="longest conversation plus reply, in tokens (default: %(default)s)")
    add_download_argument(local)
    add_device_arguments(local)
    add_compilation_cache_arguments(local, "the data directory ($FLINT_DATA_DIR, else $XDG_DATA_HOME/flint, "
                                           "else ~/.local/share/flint)")


def first_key(keys: str | None) -> str | None:
    """The first of a comma-separated list of keys (the server's FLINT_API_KEY may hold several)."""
    return next((key.strip() for key in (keys or "").split(",") if key.strip()), None)


def flag_type(check):
    """An argparse type from one of the session's checks, its message kept."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def chat(args: argparse.Namespace) -> int:
    """Run the chat until the user leaves; the exit status."""
    # Ctrl-C is how a reply is stopped, so it must raise KeyboardInterrupt whatever the chat
    # inherited: Python keeps SIGINT ignored when the parent ignored it (a shell's background
    # job, a service manager), and Ctrl-C would then do nothing while a reply streams.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_chat(args, Screen())
    except KeyboardInterrupt:  # while the model loads or the server is first asked for its model
        print()
        return EXIT_INTERRUPTED


def run_chat(args: argparse.Namespace, screen: Screen) -> int:
    transport = open_transport(args, screen)
    if transport is None:
        return EXIT_BAD_ARGUMENTS
    session = ChatSession(system=args.system, temperature=args.temperature, max_tokens=args.max_tokens)
    enable_line_editing()
    screen.note(f"chatting with {transport.describe()}; /help for commands, Ctrl-D to leave")
    while (line := read_line(screen)) is not None:
        if is_command(line):
            outcome = run_command(line, session)
            if outcome.quit:
                break
            show(outcome, screen)
        elif line.strip():
            ask(transport, session, line, screen)
    return 0


def open_transport(args: argparse.Namespace, screen: Screen) -> Transport | None:
    """The server's transport, or (--local) an engine built here; None when the flags cannot be served."""
    if not args.local:
        from api.terminal.remote import RemoteChat
        return RemoteChat(args.url, args.api_key, args.model)
    from api.server.local_engine import load_local_engine
    from api.terminal.local import LocalChat
    from engine.loader.source import ModelNotFoundError

    try:
        engine = load_local_engine(args)
    except (ModelNotFoundError, ValueError) as error:
        screen.error(str(error))
        return None
    return LocalChat(engine, args.model or "the embedded SmolLM2-135M-Instruct")


def enable_line_editing() -> None:
    """input() with line editing and this session's history, where the platform has readline."""
    try:
        import readline  # noqa: F401  (importing it is what turns it on)
    except ImportError:
        pass


def read_line(screen: Screen) -> str | None:
    """The next line typed; None to leave (Ctrl-D, or Ctrl-C twice in a row)."""
    interrupted = False
    while True:
        try:
            return input(PROMPT)
        except EOFError:
            print()
            return None
        except KeyboardInterrupt:
            print()
            if interrupted:
                return None
            interrupted = True
            screen.note("(Ctrl-C again, Ctrl-D or /quit to leave)")


def show(outcome: Outcome, screen: Screen) -> None:
    if outcome.failed:
        screen.error(outcome.message)
    else:
        screen.say(outcome.message)


def ask(transport: Transport, session: ChatSession, question: str, screen: Screen) -> None:
    """Send `question` with the conversation, stream the reply, and keep both turns."""
    session.messages.append({"role": "user", "content": question})
    reply = screen.reply()
    try:
        with closing(transport.stream(session)) as deltas:  # closed at once on Ctrl-C: the request ends
            for delta in deltas:
                reply.show(delta)
    except ChatError as error:
        reply.end()
        session.messages.pop()  # unanswered: the question can be asked again
        screen.error(str(error))
        return
    except KeyboardInterrupt:
        reply.end()
        screen.note("(stopped)")
        if not reply.content:  # nothing of an answer: the question goes too, keeping the turns paired
            session.messages.pop()
            return
    else:
        reply.end()
    session.messages.append({"role": "assistant", "content": reply.content})
