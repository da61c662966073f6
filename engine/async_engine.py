"""AsyncEngine: the Engine on a background thread, one asyncio stream of outputs per request.

The Engine is not thread-safe, so only the background thread touches it. Callers post
commands (add, abort) to a queue the thread drains before every step; outputs travel back
to each request's asyncio.Queue through the caller's event loop. While nothing is running
the thread blocks on the command queue rather than spinning.

A request that fails on its own (engine/host/faults.py: its grammar, its text, its data) ends
its stream with RequestFailedError, and the thread serves on. If a step itself raises (the
device, a collective), the thread stops: every request still streaming gets
EngineDeadError, later calls to `generate` raise it at once, and the owner hears of it
through `on_death`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import Any

from engine.engine import Engine
from engine.host.heap import release_freed_memory
from engine.host.request import Request, RequestOutput
from engine.residency import EngineAsleepError

log = logging.getLogger("flint")


class EngineDeadError(RuntimeError):
    """The engine thread stopped on an error; no request can be served any more."""


class RequestFailedError(RuntimeError):
    """One request failed on its own (its cause chained); the engine serves the others."""


class RequestAbortedError(RuntimeError):
    """The server aborted the request before it finished, to change its weights or sleep
    (`control` with ABORT); sent again, it runs on what the server serves next."""


DRAIN, ABORT = "drain", "abort"  # what `control` does with the requests it finds unfinished


class AsyncEngine:
    """Runs `engine` in a daemon thread; `generate` streams one request's outputs.

    `on_death(error)` is called once, from the engine thread, if that thread stops on an
    error (after every waiting stream has been given it); it must be thread-safe."""

    def __init__(self, engine: Engine, on_death: Callable[[BaseException], None] | None = None):
        self.engine = engine
        self.on_death = on_death
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        # Operations waiting for the engine to run out of work (`control`), and the requests
        # that came meanwhile, admitted once they have run.
        self._controls: deque[tuple[Callable[[Engine], Any], Future]] = deque()
        self._held: list[Request] = []

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="flint-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Abort everything in flight and end the thread."""
        if self._thread is not None:
            self._commands.put(("stop", None))
            self._thread.join()
            self._thread = None

    async def generate(self, request: Request) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs as steps produce them, the last one finished.

        Raises ValueError at once for a request the engine can never serve. Leaving the
        iteration early (a client that disconnected) aborts the request, freeing its pages."""
        self._raise_if_dead()
        self.engine.residency.require_awake()
        self.engine.validate(request)
        if request.request_id in self._streams:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        outputs: asyncio.Queue = asyncio.Queue()
        self._streams[request.request_id] = (asyncio.get_running_loop(), outputs)
        self._commands.put(("add", request))
        finished = False
        try:
            # The thread sets _error before it reads _streams to hand the error out, and the
            # stream was registered before this read: either this sees the error or the
            # thread sees the stream, so a request racing the death never waits forever.
            self._raise_if_dead()
            while not finished:
                output = await outputs.get()
                if isinstance(output, EngineDeadError):
                    raise output
                if isinstance(output, (ValueError, RequestFailedError, RequestAbortedError, EngineAsleepError)):
                    finished = True
                    raise output
                finished = output.finished
                yield output
        finally:
            self._streams.pop(request.request_id, None)
            if not finished:
                self._commands.put(("abort", request.request_id))

    def _raise_if_dead(self) -> None:
        if self._error is not None:
            raise EngineDeadError("the engine stopped") from self._error

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))

    async def control(self, operation: Callable[[Engine], Any], mode: str = DRAIN) -> Any:
        """`operation(engine)`'s result (or error), run on the engine thread once no request is
        unfinished: those in flight finish first (DRAIN) or end now with RequestAbortedError
        (ABORT). Requests that come meanwhile wait, and are admitted after it."""
        if mode not in (DRAIN, ABORT):
            raise ValueError(f"mode must be {DRAIN!r} or {ABORT!r}, not {mode!r}")
        self._raise_if_dead()
        done: Future = Future()
        self._commands.put(("control", (operation, mode, done)))
        return await asyncio.wrap_future(done)

    @property
    def num_in_flight(self) -> int:
        """Requests between `generate` and their last output: running, waiting, or posted to
        the engine thread and not yet picked up. Read on the event loop, which alone changes it."""
        return len(self._streams)

    @property
    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._error is None

    def _run(self) -> None:
        try:
            stepped = False  # since the engine last ran out of work
            while True:
                idle = not self.engine.has_unfinished()
                if idle and stepped:
                    release_freed_memory()  # engine/host/heap.py: once per busy spell, before waiting
                    stepped = False
                if not self._drain_commands(block=idle and not self._controls):
                    break
                self._run_controls()
                for output in self.engine.step():
                    self._deliver(output)
                stepped = True
        except BaseException as error:  # report to every waiting caller, then to the owner
            self._error = error  # first: see the comment in `generate`
            for request_id in list(self._streams):  # wrapped: a dead engine's ValueError is no refusal
                dead = EngineDeadError("the engine stopped")
                dead.__cause__ = error
                self._deliver_to(request_id, dead)
            self._refuse_controls(error)
            if self.on_death is not None:
                self.on_death(error)

    def _drain_commands(self, block: bool) -> bool:
        """Apply queued commands; False once told to stop."""
        while True:
            try:
                kind, payload = self._commands.get(block=block)
            except queue.Empty:
                return True
            block = False
            if kind == "stop":
                for request_id in list(self._streams):
                    self.engine.abort(request_id)
                self._refuse_controls(RuntimeError("the engine stopped"))
                return False
            self._apply(kind, payload)

    def _apply(self, kind: str, payload) -> None:
        if kind == "add":
            self._add(payload)
        elif kind == "abort":
            self._held = [request for request in self._held if request.request_id != payload]
            output = self.engine.abort(payload)
            if output is not None:
                self._deliver(output)
        elif kind == "control":
            self._take_control(*payload)

    def _add(self, request: Request) -> None:
        if self._controls:  # behind an operation waiting for the engine to drain
            self._held.append(request)
            return
        try:
            self.engine.add_request(request)
        except (ValueError, EngineAsleepError) as error:
            self._deliver_to(request.request_id, error)
        except Exception as error:  # the request's own host work (engine/host/faults.py)
            log.error("request %s could not be added; the engine serves on", request.request_id, exc_info=error)
            self._deliver_to(request.request_id, request_failed(request.request_id, error))

    def _take_control(self, operation: Callable[[Engine], Any], mode: str, done: Future) -> None:
        self._controls.append((operation, done))
        if mode == ABORT:
            for request_id in self.engine.unfinished_request_ids():
                self.engine.abort(request_id)
                self._deliver_to(request_id, RequestAbortedError(
                    f"request {request_id} was aborted: the server changed its weights or went to sleep"))

    def _refuse_controls(self, cause: BaseException) -> None:
        while self._controls:
            dead = EngineDeadError("the engine stopped before the operation ran")
            dead.__cause__ = cause
            self._controls.popleft()[1].set_exception(dead)

    def _run_controls(self) -> None:
        """Run the operations waiting, once the engine has no unfinished request; then admit
        the requests held behind them."""
        while self._controls and not self.engine.has_unfinished():
            operation, done = self._controls.popleft()
            try:
                done.set_result(operation(self.engine))
            except Exception as error:  # the caller's to report; the engine serves on
                done.set_exception(error)
        if not self._controls:
            held, self._held = self._held, []
            for request in held:
                self._add(request)

    def _deliver(self, output: RequestOutput) -> None:
        if output.error is not None:
            self._deliver_to(output.request_id, request_failed(output.request_id, output.error))
        else:
            self._deliver_to(output.request_id, output)

    def _deliver_to(self, request_id: str, item) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            loop, outputs = stream
            try:
                loop.call_soon_threadsafe(outputs.put_nowait, item)
            except RuntimeError:  # that caller's event loop has closed: nobody is listening
                pass


def request_failed(request_id: str, error: BaseException) -> RequestFailedError:
    failure = RequestFailedError(f"request {request_id} failed: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure
