"""The persistent compilation cache: compiled XLA programs kept on disk between runs.

Compiling SmolLM2's nine token buckets takes about a minute on a 2-core CPU; loading them
from the cache takes about half a second each. JAX keys every entry by the program, the
compile options, the devices and the jax version, so an entry is only ever used by the
program it was compiled from. JAX decides whether a process uses the cache at its first
compile; `use_compilation_cache` resets that decision, so it works whenever it is called,
but only compiles after the call are cached.

`CompileCounter` counts what a piece of code compiled and what it loaded from the cache
(JAX's monitoring events), which start-up reports and the tests check: a warm restart
compiles nothing.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

# JAX's monitoring events (jax._src.dispatch and jax._src.compiler): one duration event for
# every program handed to XLA, served from the cache or compiled; one event per cache hit.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def use_compilation_cache(directory: str | os.PathLike) -> Path:
    """Keep every program this process compiles from now on in `directory` (created, for
    this user only: JAX runs what it finds there), and load the ones already there."""
    path = Path(directory).expanduser()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Every program, however small or quick to compile: a restart should compile nothing.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _reset()
    return path


def no_compilation_cache() -> None:
    """Compile every program from now on, keeping none (whatever $JAX_COMPILATION_CACHE_DIR says)."""
    jax.config.update("jax_compilation_cache_dir", None)
    _reset()


def _reset() -> None:
    """Have JAX read the cache settings again at its next compile (it reads them at its
    first), without its log line saying so."""
    logger = logging.getLogger("jax._src.compilation_cache")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        compilation_cache.reset_cache()
    finally:
        logger.setLevel(level)


def compilation_cache_dir() -> str | None:
    """The directory this process's compiled programs are kept in, or None."""
    return jax.config.jax_compilation_cache_dir


class CompileCounter:
    """Within `with CompileCounter() as counts:`, the programs compiled and those loaded
    from the persistent cache, in every thread of the process; `on_program(name, seconds,
    from_cache)`, when given, is called for each (on the thread that asked for it)."""

    def __init__(self, on_program: Callable[[str, float, bool], None] | None = None) -> None:
        self.compiled = 0
        self.loaded = 0  # from the persistent cache
        self.on_program = on_program
        self._lock = threading.Lock()
        self._hit = threading.local()  # JAX reports a cache hit just before the program's event

    def describe(self) -> str:
        """`"3 programs compiled, 8 loaded from the compilation cache at DIR"`."""
        directory = compilation_cache_dir()
        where = f"the compilation cache at {directory}" if directory else "the compilation cache (off)"
        return f"{self.compiled} programs compiled, {self.loaded} loaded from {where}"

    def _on_event(self, event: str, **_) -> None:
        if event == CACHE_HIT_EVENT:
            self._hit.value = True

    def _on_duration(self, event: str, duration: float, fun_name: str = "?", **_) -> None:
        if event != BACKEND_COMPILE_EVENT:
            return
        from_cache, self._hit.value = getattr(self._hit, "value", False), False
        with self._lock:
            if from_cache:
                self.loaded += 1
            else:
                self.compiled += 1
        if self.on_program is not None:
            self.on_program(fun_name, duration, from_cache)

    def start(self) -> CompileCounter:
        """Count from now on (what `with` does), until `stop`."""
        jax.monitoring.register_event_listener(self._on_event)
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        return self

    def stop(self) -> None:
        jax.monitoring.unregister_event_duration_listener(self._on_duration)
        jax.monitoring.unregister_event_listener(self._on_event)

    def __enter__(self) -> CompileCounter:
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()
