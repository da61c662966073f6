"""What `flint serve` and `flint generate` show while the model starts (api/server/progress.py):
on a terminal with text logs, a "loading weights" then a "compiling buckets" line with their
counts, and the log lines whole above them; off a terminal, or with JSON logs, the log lines
alone; `flint generate`'s spinner until the first token, with stdout the answer alone."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.progress import Task, TaskID

import api.server.lifecycle as lifecycle
import api.server.progress as progress
from api.server.cli import build_parser, generate
from api.server.logs import JsonFormatter
from api.server.progress import TimeLeftColumn, first_token_spinner, startup_display
from api.server.settings import Settings
from engine.engine import Engine
from engine.loader.progress import BUCKETS, WEIGHTS

NUM_TENSORS, NUM_BUCKETS = 3, 2
BAR = "━"


def terminal(file: io.StringIO) -> Console:
    """A console that takes `file` for an interactive terminal, and records what it draws."""
    return Console(file=file, record=True, force_terminal=True, force_interactive=True, width=100)


def start_engine(model, config, report=None, progress=None, **_) -> SimpleNamespace:
    """Engine.from_model's stand-in: a start-up's report messages and progress counts."""
    tell = progress or (lambda *_: None)
    report("loading the model")
    for done in range(NUM_TENSORS + 1):
        tell(WEIGHTS, done, NUM_TENSORS)
    for done in range(NUM_BUCKETS + 1):
        tell(BUCKETS, done, NUM_BUCKETS)
        if done:
            report(f"compiled bucket {done}/{NUM_BUCKETS}")
    return SimpleNamespace(tokenizer=None)


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(Engine, "from_model", start_engine)
    monkeypatch.setattr(lifecycle, "set_up_compilation_cache", lambda directory: None)


@pytest.fixture
def flint_log(caplog):
    """The "flint" logger at INFO, and a function that adds a handler to it for the test."""
    caplog.set_level(logging.INFO, logger="flint")
    added = []

    def add(stream, formatter: logging.Formatter) -> logging.Handler:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        logging.getLogger("flint").addHandler(handler)
        added.append(handler)
        return handler

    yield add
    for handler in added:
        logging.getLogger("flint").removeHandler(handler)


def screen(drawn: str) -> list[str]:
    """The lines a terminal shows once `drawn` is written: text and newlines, and the cursor
    moves up and line clears a live display redraws itself with (colours dropped)."""
    lines, row = [""], 0
    for piece in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", drawn):
        if piece == "\n":
            row += 1
            lines += [""] * (row + 1 - len(lines))
        elif piece == "\x1b[2K":
            lines[row] = ""
        elif re.fullmatch(r"\x1b\[\d*A", piece):
            row -= int(piece[2:-1] or 1)
        elif not piece.startswith("\x1b") and piece != "\r":
            lines[row] += piece
    return [line.rstrip() for line in lines]


def is_line(line: str, label: str, count: str) -> bool:
    """Whether `line` is the progress line `label`, drawn complete with its bar and `count`."""
    return re.fullmatch(rf"{label} +{BAR}+ {count} \d:\d\d:\d\d", line) is not None


def test_both_lines_show_in_order_with_their_counts():
    file = io.StringIO()
    display = startup_display("text", terminal(file))
    with display:
        for done in range(NUM_TENSORS + 1):
            display(WEIGHTS, done, NUM_TENSORS)
        for done in range(NUM_BUCKETS + 1):
            display(BUCKETS, done, NUM_BUCKETS)
    weights, buckets, after = screen(file.getvalue())
    assert is_line(weights, "loading weights", f"{NUM_TENSORS}/{NUM_TENSORS}"), weights
    assert is_line(buckets, "compiling buckets", f"{NUM_BUCKETS}/{NUM_BUCKETS}"), buckets
    assert after == ""  # the cursor left on the line below


def test_the_time_left_is_at_the_pace_so_far_from_the_first_step_on():
    def task(completed: int, finished_time: float | None = None) -> Task:
        begun = Task(TaskID(0), "compiling buckets", total=3, completed=completed, _get_time=lambda: 100.0,
                     finished_time=finished_time)
        begun.start_time = 90.0  # 10 s ago
        return begun

    column = TimeLeftColumn()
    assert column.render(task(0)).plain == "-:--:--"
    assert column.render(task(1)).plain == "0:00:20"  # two more at 10 s each
    assert column.render(task(3, finished_time=12.0)).plain == "0:00:12"  # done: the time it took


def test_serve_draws_the_engine_s_progress_below_whole_log_lines(fake_engine, flint_log):
    file = io.StringIO()
    handler = flint_log(file, logging.Formatter("%(message)s"))  # a text log handler on the same terminal
    lifecycle.load_engine(Settings(), display=startup_display("text", terminal(file)))
    *logged, weights, buckets, loaded, after = screen(file.getvalue())
    # Each log line printed whole above the lines while they showed, none inside a frame.
    assert logged == ["loading the model", "compiled bucket 1/2", "compiled bucket 2/2"]
    assert is_line(weights, "loading weights", f"{NUM_TENSORS}/{NUM_TENSORS}"), weights
    assert is_line(buckets, "compiling buckets", f"{NUM_BUCKETS}/{NUM_BUCKETS}"), buckets
    assert loaded.startswith("model loaded in") and after == ""  # logged below once they stopped
    assert handler.stream is file  # pointed back to the terminal


def test_json_logs_carry_none_of_it(fake_engine, flint_log):
    file = io.StringIO()
    console = terminal(file)  # a terminal even so
    flint_log(file, JsonFormatter())
    display = startup_display("json", console)
    assert display is None
    lifecycle.load_engine(Settings(log_format="json"), display=display)
    lines = file.getvalue().splitlines()
    messages = [json.loads(line)["message"] for line in lines]  # every line one JSON object
    assert messages[:2] == ["loading the model", "compiled bucket 1/2"] and "compiled bucket 2/2" in messages
    assert "loading weights" not in file.getvalue() and BAR not in file.getvalue() and "\x1b" not in file.getvalue()
    assert console.export_text() == ""


def test_off_a_terminal_nothing_is_drawn(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a file
    monkeypatch.setenv("FORCE_COLOR", "1")  # which many CI runs set: colours, still no terminal
    assert startup_display("text") is None
    spinner = first_token_spinner()
    with spinner:
        spinner(WEIGHTS, 1, NUM_TENSORS)
    assert sys.stderr.getvalue() == ""


class Stream(io.StringIO):
    """One of a terminal's two streams: each write is kept, with the stream's name, in order."""

    def __init__(self, name: str, writes: list[tuple[str, str]]):
        super().__init__()
        self.name, self.writes = name, writes

    def write(self, text: str) -> int:
        if text:
            self.writes.append((self.name, text))
        return super().write(text)


class Answering:
    """An engine that answers one request: a step with no token, then "Hello" and " world"."""

    tokenizer = SimpleNamespace(encode=lambda text: [1, 2, 3])

    def add_request(self, request) -> None:
        def output(ids, text, finish=None):
            return SimpleNamespace(request_id=request.request_id, new_token_ids=ids, text=text, logprobs=None,
                                   prompt_logprobs=None, num_cached_tokens=0, finished=finish is not None,
                                   finish_reason=finish, stop_reason=None)

        self.steps = [[], [output([], "")], [output([7], "Hello")], [output([8], " world", "length")]]

    def has_unfinished(self) -> bool:
        return bool(self.steps)

    def step(self) -> list:
        return self.steps.pop(0)

    def abort(self, request_id) -> None:
        self.steps = []


def test_generate_spins_until_the_first_token_and_stdout_is_the_answer_alone(fake_engine, monkeypatch):
    writes: list[tuple[str, str]] = []
    monkeypatch.setattr(progress, "terminal_console", lambda: terminal(Stream("stderr", writes)))
    monkeypatch.setattr(sys, "stdout", Stream("stdout", writes))
    monkeypatch.setattr(Engine, "from_model", lambda *args, **kwargs: start_engine(*args, **kwargs) and Answering())
    monkeypatch.setattr("engine.loader.source.resolve_model", lambda model, download=False: model)
    assert generate(build_parser().parse_args(["generate", "Hi", "--no-compilation-cache"])) == 0

    assert "".join(text for name, text in writes if name == "stdout") == "Hello world\n"
    spun = "".join(text for name, text in writes if name == "stderr")
    # The spinner's text follows the start-up (drawn at least with each report line above it).
    assert "compiling buckets 1/2" in spun and "waiting for the first token" in spun
    first_text = writes.index(("stdout", "Hello"))
    assert all(name == "stdout" for name, _ in writes[first_text:])  # the spinner gone before the answer ...
    assert screen("".join(text for _, text in writes)) == [  # ... and its line with it
        "flint: loading the model", "flint: compiled bucket 1/2", "flint: compiled bucket 2/2", "Hello world", ""]
