"""The compiled step of each token bucket (engine/device/runner.py's programs).

Every token bucket is compiled ahead of time (`warmup`), at start-up or in the background
while the engine serves, and a step only ever calls one of those executables: a shape that
was not compiled is an error, not a silent recompile in the middle of serving.

A bucket's step is lowered through its kept export where the process keeps them
(engine/device/step_export.py: a warm start then traces nothing), else traced; XLA's
compile of it is served by the persistent compilation cache (engine/device/compile_cache.py)
where it was compiled before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import jax

from engine.device.step_export import StepStore, lowered_steps_dir
from engine.loader.progress import BUCKETS, Progress, StageCount

log = logging.getLogger("flint")


@dataclass(frozen=True)
class StepProgram:
    """What compiling a bucket's step takes from the runner."""

    step: Callable  # the Python function traced: (state, kv_cache, batch, num_steps)
    jitted: Callable  # jax.jit of `step`, donating the KV cache (its argument 1)
    abstract_args: Callable[[int], tuple]  # a bucket's arguments, as shapes, dtypes and shardings
    key_parts: tuple  # what the traced step depends on beyond its arguments (step_export.step_key)
    custom_calls: tuple[str, ...] = ()  # FFI targets the step calls (vouched for to jax.export)
    compiler_options: dict | None = None
    exportable: bool = True  # a step on one CPU device, in one process
    after_compile: Callable[[int], None] | None = None  # called with each bucket compiled


class BucketPrograms:
    """The executables of `buckets` (ascending), compiled by `warmup`."""

    def __init__(self, buckets: tuple[int, ...], program: StepProgram) -> None:
        self.buckets = buckets
        self.program = program
        self.compiled: dict[int, Callable] = {}
        self.compile_seconds: dict[int, tuple[float, float]] = {}  # bucket: (lowering, XLA compile)
        self.kept_buckets: set[int] = set()  # those lowered from a kept export, not traced
        self._exportable = program.exportable  # until an export fails: then every bucket is traced

    def warmup(self, report: Callable[[str], None] | None = None, buckets: tuple[int, ...] | None = None,
               progress: Progress | None = None, threads: int = 1) -> float:
        """Compile `buckets` (default: all) now, `threads` at a time; returns the seconds it
        took. `report` is told each bucket as a log message, `progress` as a count
        (engine/loader/progress.py)."""
        started = time.perf_counter()
        buckets = self.buckets if buckets is None else buckets
        count = StageCount(progress, BUCKETS, len(buckets))
        for index, bucket in enumerate(self._compile_each(buckets, threads), 1):
            count.advance()
            if report:
                lowering, compiling = self.compile_seconds.get(bucket, (0.0, 0.0))
                lowered = "its kept lowering read" if bucket in self.kept_buckets else "lowered"
                report(f"compiled bucket {index}/{len(buckets)}: {bucket} tokens, {lowered} in {lowering:.1f} s and "
                       f"compiled in {compiling:.1f} s ({time.perf_counter() - started:.1f} s in all)")
        return time.perf_counter() - started

    def essential(self) -> tuple[int, ...]:
        """The buckets that serve every step: one token (a single stream's decode) and the
        largest. Until the others are compiled a step runs in the smallest compiled bucket
        that holds it, padded: correct, only slower."""
        return tuple(dict.fromkeys((self.buckets[0], self.buckets[-1])))

    def remaining(self) -> tuple[int, ...]:
        return tuple(bucket for bucket in self.buckets if bucket not in self.compiled)

    def bucket_for(self, num_tokens: int) -> int:
        """The smallest compiled bucket holding `num_tokens` (the smallest bucket at all
        before anything is compiled: tests and tools run uncompiled through plain jit)."""
        compiled = [bucket for bucket in self.buckets if bucket in self.compiled]
        for bucket in compiled or self.buckets:
            if bucket >= num_tokens:
                return bucket
        raise ValueError(f"{num_tokens} tokens exceed the largest bucket {self.buckets[-1]}")

    def _compile_each(self, buckets: tuple[int, ...], threads: int) -> Iterator[int]:
        """Compile each bucket, yielding it once compiled: on this thread, or on `threads`
        threads at once, where XLA's half of a compile (or of a load from the compilation
        cache) overlaps another's. A multi-process group compiles in order, on every process
        alike (`after_compile` puts a batch on its mesh: engine/device/multihost.py)."""
        if threads <= 1 or len(buckets) <= 1 or jax.process_count() > 1:
            for bucket in buckets:
                self.compile(bucket)
                yield bucket
            return
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="flint-bucket") as pool:
            compiling = [pool.submit(self.compile, bucket) for bucket in buckets]
            for bucket, done in zip(buckets, compiling):
                done.result()
                yield bucket

    def compile(self, bucket: int) -> Callable:
        """The step for `bucket`, compiled from shapes alone: it may run in a background
        thread while steps run, and the cache arrays it would otherwise read are donated."""
        if bucket not in self.compiled:
            started = time.perf_counter()
            lowered = self._lower(bucket, self.program.abstract_args(bucket))
            lowered_at = time.perf_counter()
            self.compiled[bucket] = lowered.compile()
            # Where start-up goes: tracing and lowering (Python, Mosaic GPU's kernel
            # lowering among it) against XLA's compile.
            self.compile_seconds[bucket] = (lowered_at - started, time.perf_counter() - lowered_at)
            if self.program.after_compile is not None:
                self.program.after_compile(bucket)
        return self.compiled[bucket]

    def _lower(self, bucket: int, args: tuple):
        """The step of `bucket` over `args` lowered, through its kept export where it can be."""
        store = self._step_store()
        if store is not None:
            program = self.program
            try:
                kept = store.lower(program.step, args, program.key_parts, donate=1,
                                   compiler_options=program.compiler_options, custom_calls=program.custom_calls)
            except Exception as error:  # noqa: BLE001 (whatever export refuses, tracing still serves)
                log.info("the step cannot be exported (%s): it is traced at each start", error)
                self._exportable = False
            else:
                if kept.found:
                    self.kept_buckets.add(bucket)
                return kept
        return self.program.jitted.lower(*args)

    def _step_store(self) -> StepStore | None:
        """Where lowered steps are kept (`keep_lowered_steps`), for a program on one CPU
        device (others trace at each start: a GPU kernel's custom calls would need their own
        vouching, and a sharded step its mesh)."""
        directory = lowered_steps_dir()
        if directory is None or not self._exportable or jax.default_backend() != "cpu":
            return None
        return StepStore(directory)
