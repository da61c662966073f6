"""What `flint serve` and `flint generate` show on a terminal while the model starts.

`flint serve` draws two lines on stderr, "loading weights" and "compiling buckets", each with
its bar, its count and the time left (the time taken once done), from the engine's progress
counts (engine/loader/progress.py). Only on a terminal and with `--log-format text`: off a
terminal, or with JSON logs, the log lines alone tell how start-up goes, as before, and
nothing of the display is written (a log collector wants no redraws, and a log file no bars).

While the lines show, each log handler that writes to the same terminal is pointed through
the display's console, which prints every log line whole above the bars: written straight to
the terminal, a line would land in the middle of a redraw. The loader's own log lines still
print, since they tell what the bars do not (where the weights came from, the devices, each
bucket's lowering and compile times), and the scrollback holds what it held without the bars.

The lines go once the model is loaded and the buckets it needs before serving are compiled.
The rest compile in the background while the server serves, and are only logged: a live
region under the request log for as long as that takes would be redrawn under every access
line, and nobody waits on it, the server already answers.

`flint generate` shows a spinner on stderr until the first token (`FirstTokenSpinner`);
stdout carries the generated text alone."""

from __future__ import annotations

import datetime
import io
import logging
import sys
import threading

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.spinner import Spinner
from rich.text import Text

from engine.loader.progress import BUCKETS, WEIGHTS

STAGE_LABELS = {WEIGHTS: "loading weights", BUCKETS: "compiling buckets"}
WAITING = "waiting for the first token"


def terminal_console() -> Console | None:
    """A console on stderr where stderr is an interactive terminal, else None.

    Decided by the stream itself: rich would also take FORCE_COLOR, which many CI runs set,
    for a terminal, and a captured log would fill with redraws."""
    if not sys.stderr.isatty():
        return None
    console = Console(stderr=True)
    return console if console.is_interactive else None  # not TERM=dumb


def startup_display(log_format: str, console: Console | None = None) -> StartupDisplay | None:
    """`flint serve`'s progress lines on `console` (default: stderr where it is a terminal),
    or None where they do not show: off a terminal, or with `log_format` json."""
    if log_format != "text":
        return None
    console = console if console is not None else terminal_console()
    return None if console is None else StartupDisplay(console)


class StartupDisplay:
    """One progress line per start-up stage, in the order the stages begin.

    An engine `Progress` (called with (stage, done, total)) and a context manager: the lines
    show from entering until leaving or `close`, whichever comes first."""

    def __init__(self, console: Console):
        self.console = console
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeLeftColumn(),
                             console=console, redirect_stdout=False)  # stdout may not be this terminal
        self._lines: dict[str, TaskID] = {}
        self._logs = LogsAbove(console)
        self._lock = threading.Lock()
        self._open = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        line = self._lines.get(stage)
        if line is None:
            self._lines[stage] = self.bars.add_task(STAGE_LABELS.get(stage, stage), total=total, completed=done)
        else:  # the total too: kept weights that do not read are read from the checkpoint instead
            self.bars.update(line, total=total, completed=done)

    def __enter__(self) -> StartupDisplay:
        with self._lock:
            if not self._open:
                # Logs through the console before the bars start, and back after they stop:
                # no log line reaches the terminal straight while they show.
                self._logs.reroute()
                self.bars.start()
                self._open = True
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def close(self) -> None:
        """Stop drawing (the lines stay as last drawn, the cursor shows again); `flint serve`
        calls it before leaving by os._exit while the model still loads."""
        with self._lock:
            if self._open:
                self._open = False
                self.bars.stop()
                self._logs.restore()


class TimeLeftColumn(ProgressColumn):
    """The time left at the pace so far, and the time taken once done. rich's own column
    estimates from the pace between updates, none before the second: a start-up may compile
    only two buckets, and would show none at all."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text(clock(task.finished_time), style="progress.elapsed")
        if not task.completed or not task.total:
            return Text("-:--:--", style="progress.remaining")
        return Text(clock(task.elapsed * (task.total - task.completed) / task.completed), style="progress.remaining")


def clock(seconds: float | None) -> str:
    return str(datetime.timedelta(seconds=int(seconds or 0)))


class LogsAbove:
    """Points the log handlers that write to a console's file through that console, and back."""

    def __init__(self, console: Console):
        self.console = console
        self._rerouted: list[tuple[logging.StreamHandler, object]] = []

    def reroute(self) -> None:
        for handler in handlers_writing_to(self.console.file):
            # One stream a handler: it holds a line until its end, and each handler writes
            # under its own lock (two share none).
            self._rerouted.append((handler, handler.setStream(LinesThrough(self.console))))

    def restore(self) -> None:
        for handler, stream in self._rerouted:
            handler.setStream(stream)
        self._rerouted.clear()


def handlers_writing_to(file) -> list[logging.StreamHandler]:
    """Every stream handler of every logger (a queue handler's listener's ones included, as
    Litestar's root logger has them) that writes to `file`."""
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    handlers = [handler for logger in loggers for handler in logger.handlers]
    handlers += [inner for handler in handlers for inner in getattr(getattr(handler, "listener", None), "handlers", ())]
    return [handler for handler in dict.fromkeys(handlers)
            if isinstance(handler, logging.StreamHandler) and same_file(handler.stream, file)]


class LinesThrough(io.TextIOBase):
    """A text stream that prints each whole line written to it through `console`: above its
    live display, in its colours, and wrapped by the terminal as before (rich would break a
    long line in two, and a copied log line would come out cut)."""

    def __init__(self, console: Console):
        self.console = console
        self._partial = ""  # a line's start, until its end is written

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self.console.print(Text.from_ansi(line), soft_wrap=True)
        return len(text)


def same_file(stream, file) -> bool:
    if stream is file:
        return True
    try:
        return stream.fileno() == file.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor (a StringIO, a closed file)
        return False


class FirstTokenSpinner:
    """`flint generate`'s spinner on the terminal until the first token, its text following
    the start-up's progress; on no terminal (console None) it shows nothing.

    An engine `Progress`, and a context manager from which `stop` may leave early: call it
    before the first text goes to stdout. Transient: once stopped, its line is gone."""

    def __init__(self, console: Console | None):
        self.spinner = Spinner("dots", "loading the model")
        self.live = None if console is None else Live(self.spinner, console=console, transient=True,
                                                      refresh_per_second=12.5,  # the dots' pace
                                                      redirect_stdout=False)  # stdout: the answer alone

    def __call__(self, stage: str, done: int, total: int) -> None:
        finished = stage == BUCKETS and done == total
        self.spinner.update(text=WAITING if finished else f"{STAGE_LABELS.get(stage, stage)} {done}/{total}")

    def __enter__(self) -> FirstTokenSpinner:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def first_token_spinner(console: Console | None = None) -> FirstTokenSpinner:
    """The spinner on `console`, by default stderr where it is a terminal (else none shows)."""
    return FirstTokenSpinner(console if console is not None else terminal_console())
