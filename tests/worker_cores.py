"""Which cores a test worker runs on.

`make test` runs two pytest-xdist workers on CI's two cores. Each worker is pinned to its
own share of them (`pin_worker_to_its_cores`): XLA compiles and runs on thread pools as
wide as the machine, and two workers with such pools on two cores spent 30% more CPU on
the same tests than one process did (time slices and caches contended for).

The servers a worker starts inherit its pin. Letting the multi-device ones (a tensor-parallel
mesh, a multi-host group) use every core made them faster alone, but cost the tests beside
them more than it saved, in a full run of the suite (2026-11-26).
"""

from __future__ import annotations

import os

import threadpoolctl


def pin_worker_to_its_cores() -> None:
    """An xdist worker (and the servers it starts) runs on its own share of the cores;
    NumPy's BLAS threads are limited to match."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker and len(cores) >= count > 1:
        share = cores[int(worker.removeprefix("gw")) % count::count]
        os.sched_setaffinity(0, share)
        # NumPy's OpenBLAS sized its threads for the whole machine when it loaded; more
        # threads than cores spin against each other (the NumPy reference forwards of
        # test_engine_smollm2 took 70-80 s each instead of about 10).
        threadpoolctl.threadpool_limits(len(share))
