"""Shared test setup: the repository root on sys.path (so tests import api/ and tools/), the
embedded SmolLM2 checkpoint and tokenizer (loaded once per session), and tiny random models."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from engine.engine import tokenizer_for  # noqa: E402  (after the sys.path setup above)
from engine.loader.checkpoint import Checkpoint, load_checkpoint  # noqa: E402
from postgres_server import BACKENDS, drop_tables, empty_store_url, postgres_database  # noqa: E402


def pytest_configure(config) -> None:
    """Every server a test starts (in process or as a `flint serve` subprocess) keeps its
    store in a throwaway data directory, never in the user's ~/.local/share/flint."""
    os.environ["FLINT_DATA_DIR"] = tempfile.mkdtemp(prefix="flint-test-data-")
    use_compilation_cache(ROOT / ".pytest_cache" / "jax")


def use_compilation_cache(directory: Path) -> None:
    """Keep compiled XLA programs on disk, for this process and the servers it starts.

    Many tests build engines of the same shapes (each app compiles its buckets anew), and
    compiling dominates the suite's time on a 2-core machine: a cached bucket loads in
    about 2 s instead of 15. Entries are keyed by the program and the jax version, so a
    stale entry can't be used."""
    import jax

    settings = {"JAX_COMPILATION_CACHE_DIR": str(directory),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    os.environ.update(settings)  # subprocesses (`flint serve`, the mesh check) read these
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# Clearing jax's caches costs about a second a module (small programs compile again), so it
# waits until this many of the process's 65,530 memory mappings are taken.
MAPPINGS_BEFORE_CLEARING = 30_000


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
    """Before each module, let go of the programs the finished modules' engines compiled.

    XLA:CPU maps every compiled kernel into its own small memory areas, and one process
    may hold only `vm.max_map_count` (65,530) of them. The suite compiles thousands of
    programs in this one process: kept until exit, they ran it out of mappings, and LLVM
    aborted the run ("Fatal Python error: Aborted" in a fixture's compile). Collecting
    finished engines unmaps most of their code; clearing jax's caches unmaps the rest.
    (Done at a module's start: at the last one's teardown its final test still holds its
    fixtures.)"""
    gc.collect()
    if memory_mappings() > MAPPINGS_BEFORE_CLEARING:
        import jax
        jax.clear_caches()
        gc.collect()
    yield


def memory_mappings() -> int:
    """How many memory areas this process has mapped (every one, where /proc can't tell)."""
    try:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return MAPPINGS_BEFORE_CLEARING + 1


def pytest_unconfigure(config) -> None:
    shutil.rmtree(os.environ.pop("FLINT_DATA_DIR", ""), ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Checkpoint:
    return load_checkpoint(None)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_checkpoint):
    return tokenizer_for(smollm2_checkpoint)


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL database for the store tests (tests/postgres_server.py says where from);
    skips, saying why, when no PostgreSQL server can be had (fails instead where
    $FLINT_TEST_POSTGRES_REQUIRED is set, as .ci/run does)."""
    yield from postgres_database()


@pytest.fixture
def postgres_store_url(postgres_url) -> str:
    """An empty store's URL on PostgreSQL alone (its tables dropped)."""
    asyncio.run(drop_tables(postgres_url))
    return postgres_url


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path) -> str:
    """An empty store's URL, once on SQLite and once on PostgreSQL."""
    return empty_store_url(request, tmp_path)
