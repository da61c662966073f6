"""Freed heap memory handed back to the operating system when the engine goes idle, and
the heap settled once a model is loaded.

glibc keeps what a process frees in its arenas, for the next allocation, and gives back
only what lies at an arena's top. XLA's executions allocate and free their buffers on the
engine's and XLA's threads, so after a load the arenas hold freed pages scattered among
live ones: `malloc_trim(0)` returns every whole free page (measured: about 10 MiB of a Flint
server's 900 after `make bench-serve`'s load; 30 MiB through gdb before the sampler shrank;
well under a millisecond). The engine thread calls it once each time the engine runs out of
work, never between steps. Elsewhere than glibc it is a no-op.
"""

from __future__ import annotations

import ctypes
import gc
import platform


def _malloc_trim():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


_MALLOC_TRIM = _malloc_trim()


def release_freed_memory() -> bool:
    """Return glibc's free heap pages to the operating system; whether it could."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def settle_after_load() -> None:
    """What loading and compiling a model leave: garbage collected, the survivors (the
    model's objects, the compiled programs, the imported modules) frozen out of the cyclic
    collector's sight, and the C heap's free pages handed back.

    A full collection walks every tracked object; with a loaded engine's live among them, the
    collections that a decode step's allocations set off took a third of its host time at
    256 sequences (tools/profile_host.py: 47 ms a window of 8 steps, 30 frozen). Objects
    frozen with them are never collected as cycles: what a load leaves is meant to live."""
    gc.collect()
    gc.freeze()
    release_freed_memory()
