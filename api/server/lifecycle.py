"""Starting and stopping the engine with the app.

Loading and compiling a model takes from seconds to minutes, so it runs in a worker thread
after startup: the server answers /health with 503 "starting" meanwhile, and "ok" once the
engine runs. A load that fails (a bad checkpoint, out of memory), or an engine thread that
dies on an error later, turns the phase to "failed" (/health 503, every API request 503)
and calls `on_failure`, with which `flint serve` exits non-zero so that a supervisor starts
it again. Tests pass an `engine_factory` that builds a small engine instead."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from api.adapters.registry import AdapterRegistry
from api.core.errors import ApiError
from api.core.state import ServerState
from api.embeddings.route import routes_of
from api.server.encoders import load_encoders, stop_encoders
from api.server.engine_health import BackgroundCompile, EngineHealth, engine_health
from api.server.multihost import LeaderLink
from api.server.progress import StartupDisplay
from api.server.settings import Settings
from engine.async_engine import AsyncEngine
from engine.device.compile_cache import CompileCounter, no_compilation_cache, use_compilation_cache
from engine.device.step_export import STEPS_DIR, keep_lowered_steps
from engine.engine import Engine
from engine.host.heap import settle_after_load

log = logging.getLogger("flint")

EngineFactory = Callable[[Settings], Engine]
Result = TypeVar("Result")


def load_engine(settings: Settings, display: StartupDisplay | None = None) -> Engine:
    """The engine for `settings.model` (the embedded model when None), compiled: its programs
    loaded from `settings.compilation_cache` where they are there, and kept there, and its
    served weights mapped from the data directory where an earlier start kept them. Its
    progress is logged, and drawn by `display` (api/server/progress.py) while it loads.

    A single process compiles the essential buckets only, and the rest in the background
    once it serves. A multi-host group compiles every bucket here, on every process in the
    same order: a bucket's compile puts a batch on the mesh, a transfer across processes,
    and one made beside the first steps would cross their collectives (issue 23)."""
    set_up_compilation_cache(settings.compilation_cache)
    started = time.perf_counter()
    with CompileCounter() as counts, display or contextlib.nullcontext():
        engine = Engine.from_model(settings.model, settings.engine, report=lambda message: log.info(message),
                                   compile_all=settings.topology is not None,
                                   kept_in=kept_dir(settings), progress=display)
    log.info("model loaded in %.1f s: %s", time.perf_counter() - started, counts.describe())
    return engine


def compile_remaining(engine: Engine) -> None:
    """(In the background compile thread.) The buckets start-up left, while the engine serves."""
    with CompileCounter() as counts:
        seconds = engine.compile_remaining(report=lambda message: log.info("background: %s", message))
    log.info("every bucket ready after %.1f s more: %s", seconds, counts.describe())
    settle_after_load()  # compiling left as much behind as loading did


BACKGROUND_COMPILE_THREAD = "flint-compile"
KEPT_DIR = "kept-models"  # under --data-dir: engine/loader/served_cache.py and kept.py


def kept_dir(settings: Settings) -> str:
    """Where the served weights and description of a model are kept between starts."""
    return os.path.join(settings.data_dir, KEPT_DIR)


def set_up_compilation_cache(directory: str | None) -> None:
    """Use the cache in `directory` (None: none), and keep the lowered steps beside it
    (engine/device/step_export.py). One that cannot be used is worth a warning, not a
    server that does not start: the programs are compiled instead."""
    path = None
    if directory is not None:
        try:
            path = use_compilation_cache(directory)
        except OSError as error:
            log.warning("the compilation cache at %s cannot be used (%s): every program is compiled", directory, error)
    if path is None:
        no_compilation_cache()
    keep_lowered_steps(None if path is None else path / STEPS_DIR)


def compiled_while_serving(name: str, seconds: float, from_cache: bool) -> bool:
    """Whether a program made now was one start-up missed (then logged as such)."""
    # Start-up compiles every step shape (engine/device/runner.py), the essential ones before the
    # server is healthy and the rest in the background thread: a program made by any other
    # thread is one it missed, and a request waited for it.
    if threading.current_thread().name == BACKGROUND_COMPILE_THREAD:
        return False
    log.warning("program %s %s while serving (%.2f s)", name,
                "loaded from the compilation cache" if from_cache else "compiled", seconds)
    return True


def startup_adapters(base_id: str, engine: Engine, modules: tuple[tuple[str, str], ...]) -> AdapterRegistry:
    """The adapter registry with the adapters `--lora` named, loaded; a bad one stops start-up."""
    registry = AdapterRegistry(engine.model_config, engine.config, base_id)
    for name, path in modules:
        try:
            registry.load(name, path)
        except ApiError as error:
            raise ValueError(f"--lora {name}={path}: {error.message}") from None
        log.info("LoRA adapter %s loaded from %s", name, path)
    return registry


class EngineLifecycle:
    """Litestar startup and shutdown hooks that own the server's engine."""

    def __init__(self, server: ServerState, settings: Settings, factory: EngineFactory):
        self.server = server
        self.settings = settings
        self.factory = factory
        # Called (on the event loop) with the error when the engine cannot be loaded.
        self.on_failure: Callable[[BaseException], None] | None = None
        self.error: BaseException | None = None  # why the engine could not be loaded
        self._loading: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loader: threading.Thread | None = None
        self._watch = CompileCounter(on_program=self._compiled_while_serving)
        self.group: LeaderLink | None = None  # a multi-host leader's link to its followers
        self.background = BackgroundCompile()  # of the buckets start-up left (/health reports it)

    async def start(self) -> None:
        # The store first: a database that cannot be reached stops start-up at once.
        try:
            await self.server.store.open()
        except Exception:
            log.exception("the store at %s could not be opened", self.server.store.display_url)
            raise
        self._loop = asyncio.get_running_loop()
        self._loading = asyncio.create_task(self._load())

    async def _load(self) -> None:
        try:
            self._loader, loaded = start_in_daemon_thread(self._build, self.settings)
            engine = await loaded
        except Exception as error:
            log.exception("the model could not be loaded")
            self.error = error
            self._fail(error)
            return
        if self.settings.topology is not None:  # before the first step: the followers replay them all
            self.group = LeaderLink(self.settings.topology, self.settings.follower_timeout)
            loop = self._loop
            self.group.attach(engine.engine.runner,
                              lambda message: loop.call_soon_threadsafe(self._followers_lost, message))
        engine.start()
        self._watch.start()
        if self.group is None:  # a group compiled every bucket before its first step (load_engine)
            self.background.running = True
            threading.Thread(target=self._compile_remaining, args=(engine.engine,), name=BACKGROUND_COMPILE_THREAD,
                             daemon=True).start()
        self.server.engine = engine
        if self.server.phase == "starting":  # not if shutdown began while compiling
            self.server.phase = "ok"

    def _compiled_while_serving(self, name: str, seconds: float, from_cache: bool) -> None:
        if compiled_while_serving(name, seconds, from_cache):
            self.server.metrics.count_program_compiled_while_serving()  # /metrics, for tools/soak.py

    def _compile_remaining(self, engine: Engine) -> None:
        try:
            compile_remaining(engine)
        except Exception as error:  # the engine serves on with the buckets it has, only slower
            log.exception("compiling the remaining buckets failed")
            self.background.failed(error)
        finally:
            self.background.running = False

    def engine_health(self) -> EngineHealth | None:
        """How the engine serves (buckets, attention); None until it has loaded."""
        engine = self.server.engine
        return None if engine is None else engine_health(engine.engine, self.background)

    def _build(self, settings: Settings) -> AsyncEngine:
        """(In the loading thread.) The engine, and what the API measures of its tokenizer."""
        engine = self.factory(settings)
        self.server.max_token_bytes = engine.tokenizer.longest_token_bytes()
        self.server.adapters = startup_adapters(self.server.model.id, engine, settings.lora_modules)
        self.server.encoders = load_encoders(settings.embedding_models, settings.rerank_models, {self.server.model.id},
                                             settings.encoder_row_buckets, settings.download)
        for encoder in self.server.encoders.values():
            self.server.metrics.serve_encoder(encoder.id, routes_of(encoder.checkpoint.task))
        settle_after_load()
        loop = self._loop
        return AsyncEngine(engine, on_death=lambda error: loop.call_soon_threadsafe(self._engine_died, error))

    def _engine_died(self, error: BaseException) -> None:
        group = " (in a multi-host group: a follower process may have died)" if self.group else ""
        log.error("the engine thread stopped on an error%s; the server stops serving", group, exc_info=error)
        self._fail(error)

    def _followers_lost(self, message: str) -> None:
        log.error("%s; the server stops serving", message)
        self._fail(RuntimeError(message))
        # The engine thread waits on the follower, maybe for ever: end its streams now.
        self.cut_off_generations()

    def _fail(self, error: BaseException) -> None:
        self.server.phase = "failed"
        if self.on_failure is not None:
            self.on_failure(error)

    @property
    def is_loading(self) -> bool:
        """Whether the load thread still runs: a compile cannot be interrupted, so it
        outlives `stop()` when the server is stopped while starting."""
        return self._loader is not None and self._loader.is_alive()

    @property
    def engine_blocked(self) -> bool:
        """Whether the engine thread may wait forever on a follower that stopped answering."""
        return self.group is not None and bool(self.group.lost)

    async def wait_until_serving(self) -> None:
        """Returns once the engine runs (re-raises a load failure)."""
        if self._loading is not None:
            await self._loading
        if self.error is not None:
            raise self.error

    def drain(self) -> None:
        """Shutdown began: new API requests get 503 while in-flight ones finish."""
        if self.server.phase in ("starting", "ok"):
            self.server.phase = "draining"

    def cut_off_generations(self) -> None:
        """End the generations still running with an error (shutdown's timeout ran out, or the
        engine cannot go on): each stream ends with its dialect's error event."""
        if num_open := self.server.cut_off_generations():
            log.warning("%d generation(s) still running were ended with an error", num_open)

    async def stop(self) -> None:
        self.drain()
        self.cut_off_generations()  # any still open end with an error before the engine stops
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
        if self.server.engine is not None:
            if not self.engine_blocked:  # else its thread never ends: `flint serve` leaves without it
                await asyncio.to_thread(self.server.engine.stop)
            self.server.engine = None
            self._watch.stop()
        await asyncio.to_thread(stop_encoders, self.server.encoders)
        if self.group is not None:
            await asyncio.to_thread(self.group.stop)
        await self.server.store.close()


def start_in_daemon_thread(function: Callable[..., Result],
                           *args) -> tuple[threading.Thread, asyncio.Future[Result]]:
    """`function(*args)` in a daemon thread, and a future of its result on the running loop.

    Unlike asyncio.to_thread, whose executor the event loop joins when it closes, this lets a
    server told to stop while a model compiles exit at once (see `flint serve`)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(result, error) -> None:
        if future.done():  # cancelled: the server stopped first
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = function(*args), None
        except BaseException as raised:
            result, error = None, raised
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the event loop has closed: nobody waits any more
            pass

    thread = threading.Thread(target=run, name="flint-load", daemon=True)
    thread.start()
    return thread, future
