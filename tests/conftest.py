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

from engine.loader.serving import tokenizer_for  # noqa: E402  (after the sys.path setup above)
from engine.loader.checkpoint import Checkpoint, load_checkpoint  # noqa: E402
from postgres_server import BACKENDS, drop_tables, empty_store_url, postgres_database  # noqa: E402
from worker_cores import pin_worker_to_its_cores  # noqa: E402
from worker_groups import LIVE_GROUP, GroupScheduling, first_groups_first, group_of  # noqa: E402


def pytest_configure(config) -> None:
    """Every server a test starts (in process or as a `flint serve` subprocess) keeps its
    store in a throwaway data directory, never in the user's ~/.local/share/flint."""
    os.environ["FLINT_DATA_DIR"] = tempfile.mkdtemp(prefix="flint-test-data-")
    use_compilation_cache(ROOT / ".pytest_cache" / "jax")
    pin_worker_to_its_cores()


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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (what `make test` asks for) by this suite's groups (tests/worker_groups.py)."""
    if config.getvalue("dist") == "loadgroup":
        return GroupScheduling(config, log)
    return None


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        module = module_of(item)
        if "live" in getattr(item, "fixturenames", ()) and group_of(module) != LIVE_GROUP:
            raise pytest.UsageError(f"{module} uses the live server in a way tests/worker_groups.py does not see")
    # A stable sort: the modules of a group stay in their order, tests in theirs.
    items.sort(key=lambda item: first_groups_first(module_of(item)))


def module_of(item) -> str:
    return item.path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module", autouse=True)
def release_finished_engines():
    """Before each module, free the engines of the modules before it: an engine and its
    compiled programs sit in reference cycles, which Python's collector would otherwise
    leave to its own schedule, and a worker's memory grew by gigabytes meanwhile."""
    gc.collect()
    yield


def pytest_unconfigure(config) -> None:
    shutil.rmtree(os.environ.pop("FLINT_DATA_DIR", ""), ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Checkpoint:
    return load_checkpoint(None)


@pytest.fixture(scope="session")
def smollm2_blocks_checkpoint() -> Checkpoint:
    """The embedded model as `flint serve` reads it on a CPU: its layers' own Q4_1 blocks
    and its Q8_0 embedding (engine/loader/gguf_blocks.py)."""
    return load_checkpoint(None, blocks=True)


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
