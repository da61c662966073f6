"""Which cores a test worker runs on, and the multi-device servers it starts.

`make test` runs two pytest-xdist workers on CI's two cores. Each worker is pinned to its
own share of them (`pin_worker_to_its_cores`): XLA compiles and runs on thread pools as
wide as the machine, and two workers with such pools on two cores spent 30% more CPU on
the same tests than one process did (time slices and caches contended for).

A process a worker starts inherits its pin. That suits a server on one device, but not a
group of devices (a tensor-parallel mesh, a multi-host group): their collectives wait for
every device's thread, and on one core each wait lasts until the scheduler turns to the
thread that is behind. test_multihost_live took 174 s and 176 s of CPU on one core against
79 s and 140 s on two. Those servers start `on_every_core()`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import threadpoolctl

_every_core: set[int] | None = None  # the cores the suite was given, before any pin


def pin_worker_to_its_cores() -> None:
    """An xdist worker (and the single-device servers it starts) runs on its own share of
    the cores; NumPy's BLAS threads are limited to match."""
    global _every_core
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker and len(cores) >= count > 1:
        _every_core = set(cores)
        share = cores[int(worker.removeprefix("gw")) % count::count]
        os.sched_setaffinity(0, share)
        # NumPy's OpenBLAS sized its threads for the whole machine when it loaded; more
        # threads than cores spin against each other (the NumPy reference forwards of
        # test_engine_smollm2 took 70-80 s each instead of about 10).
        threadpoolctl.threadpool_limits(len(share))


@contextmanager
def on_every_core() -> Iterator[None]:
    """Within the block, this thread and the processes it starts may run on every core.

    Affinity belongs to a thread on Linux, and a child takes its parent thread's: the
    worker's other threads keep their pin."""
    if _every_core is None:
        yield
        return
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _every_core)
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinned)
