"""The `flint` command's entry point (pyproject.toml [project.scripts]), and the collector
kept out of the server's imports.

Python's collector runs every few hundred allocations, and importing the server (JAX, the
generated models, Litestar, SQLAlchemy) makes about a million objects that live as long as
the process: each collection walks those made so far again, 0.2-0.25 s of a 1.4-1.7 s
import on a 2-core CPU. So they import with the collector off, and are frozen (never walked
again) before it comes back on."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def imports_frozen() -> Iterator[None]:
    """Import with the collector off; what was made is frozen before it is on again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def main() -> int:
    with imports_frozen():
        from api.server.cli import main as run_command
    return run_command()
