"""Starting and stopping the engine with the app.

Loading and compiling a model takes from seconds to minutes, so it runs in a worker thread
after startup: the server answers /health with 503 "starting" meanwhile, and "ok" once the
engine runs. Tests pass an `engine_factory` that builds a small engine instead."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from api.settings import Settings
from api.state import ServerState
from engine.async_engine import AsyncEngine
from engine.engine import Engine

log = logging.getLogger("flint")

EngineFactory = Callable[[Settings], Engine]


def load_engine(settings: Settings) -> Engine:
    """The engine for `settings.model` (the embedded model when None), compiled."""
    return Engine.from_model(settings.model, settings.engine, report=lambda message: log.info(message))


class EngineLifecycle:
    """Litestar startup and shutdown hooks that own the server's engine."""

    def __init__(self, server: ServerState, settings: Settings, factory: EngineFactory):
        self.server = server
        self.settings = settings
        self.factory = factory
        self._loading: asyncio.Task | None = None

    async def start(self) -> None:
        self._loading = asyncio.create_task(self._load())

    async def _load(self) -> None:
        engine = AsyncEngine(await asyncio.to_thread(self.factory, self.settings))
        engine.start()
        self.server.engine = engine
        self.server.phase = "ok"

    async def wait_until_serving(self) -> None:
        """Returns once the engine runs (re-raises a load failure)."""
        if self._loading is not None:
            await self._loading

    async def stop(self) -> None:
        self.server.phase = "draining"
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
        if self.server.engine is not None:
            await asyncio.to_thread(self.server.engine.stop)
            self.server.engine = None
