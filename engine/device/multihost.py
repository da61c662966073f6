"""One model served from several processes (hosts) with `jax.distributed`.

Process 0, the leader, serves HTTP, schedules and owns every request. Every process builds
the same global mesh and holds its share of the weights and KV cache. Each device operation
the leader's ModelRunner starts (a step, a chained decode window, page copies) is published
in order, and every follower replays it on its own runner. So every process launches the
same compiled program with the same inputs, as the programs' collectives need.

The operations travel through the key-value store of `jax.distributed`'s coordination
service, not a device broadcast: a step's inputs vary in size, and a broadcast compiles a
program per shape. The store is internal to the group (pickled payloads): never expose the
coordinator port beyond it.

Liveness. A follower that dies errors the leader's next collective at once: the engine
thread stops on that error, and the server turns to 503 and exits. A follower that hangs
(stopped, swapped out, wedged) never errors a collective, it blocks it; so each follower
beats a counter in the store, and the leader's watchdog fails the server when a counter
stops moving. The same counters say how far each follower has read, so the leader deletes
the operations every follower has replayed.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("flint")

OPERATION_KEY = "flint/op/{}"
HEARTBEAT_KEY = "flint/heartbeat/{}"
STOP = ("stop",)
HEARTBEAT_INTERVAL = 1.0  # seconds between a follower's beats
RECEIVE_POLL_MS = 1000  # a follower waiting for work wakes this often to see whether it should stop


@dataclass(frozen=True)
class Topology:
    """Where this process stands in the group (`flint serve --coordinator-address ...`)."""
    coordinator_address: str
    num_processes: int
    process_id: int

    @property
    def is_leader(self) -> bool:
        return self.process_id == 0


def initialize(topology: Topology, heartbeat_timeout: float) -> None:
    """Join the group: before anything else touches JAX's backend, on every process.

    CPU collectives between processes need gloo. Recoverability keeps the coordination
    service from killing every process when one fails: the leader then reports the
    failure itself (503 and a log line) and exits in order."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_recoverability", True)
    jax.distributed.initialize(topology.coordinator_address, topology.num_processes, topology.process_id,
                               heartbeat_timeout_seconds=max(1, int(heartbeat_timeout)))


def leave_group() -> None:
    """Disconnect this process from the coordination service (JAX's exit hook then has
    nothing left to do)."""
    import jax

    jax.distributed.shutdown()


def coordination_client():
    """The coordination service's client of this process (JAX keeps it in its distributed
    state; orbax and the preemption tools read it there too)."""
    from jax._src.distributed import global_state

    if global_state.client is None:
        raise RuntimeError("jax.distributed is not initialized")
    return global_state.client


def encoded(operation: tuple) -> bytes:
    """An operation as the store keeps it. A step's batch is padded to its bucket, mostly
    zeros (1.1 MB at 64 rows and the default limits, 22 kB compressed): compressing it
    first made publishing one 2.7x faster on the CPU machine (3.2 against 8.6 ms)."""
    return zlib.compress(pickle.dumps(operation, protocol=5), 1)


def decoded(payload: bytes) -> tuple:
    return pickle.loads(zlib.decompress(payload))


class OperationLog:
    """The leader's side: operations numbered in the order they are published."""

    def __init__(self, client) -> None:
        self._client = client
        self._published = 0
        self._deleted = 0

    def publish(self, operation: tuple) -> None:
        self._client.key_value_set_bytes(OPERATION_KEY.format(self._published), encoded(operation))
        self._published += 1

    def forget_before(self, index: int) -> None:
        """Delete the operations every follower has replayed (those numbered below `index`)."""
        for number in range(self._deleted, index):
            self._client.key_value_delete(OPERATION_KEY.format(number))
        self._deleted = max(self._deleted, index)


class OperationReader:
    """A follower's side: the leader's operations, in order; `replayed` counts them."""

    def __init__(self, client) -> None:
        self._client = client
        self.replayed = 0

    def next(self, should_stop: Callable[[], bool]) -> tuple:
        """The next operation, waiting as long as it takes (STOP once `should_stop()`)."""
        key = OPERATION_KEY.format(self.replayed)
        while not should_stop():
            try:
                payload = self._client.blocking_key_value_get_bytes(key, RECEIVE_POLL_MS)
            except Exception as error:  # a timeout; anything else is the coordinator gone
                if "DEADLINE_EXCEEDED" in str(error) or "timed out" in str(error).lower():
                    continue
                raise
            return decoded(payload)
        return STOP


class Heartbeat(threading.Thread):
    """A follower's beat: a counter and how many operations it has replayed, every second.
    A thread of its own, so that it beats while the main thread waits inside a step."""

    def __init__(self, client, process_id: int, reader: OperationReader) -> None:
        super().__init__(name="flint-heartbeat", daemon=True)
        self._client, self._key, self._reader = client, HEARTBEAT_KEY.format(process_id), reader
        self.stopped = threading.Event()

    def run(self) -> None:
        beat = 0
        while not self.stopped.wait(HEARTBEAT_INTERVAL if beat else 0):
            beat += 1
            try:
                self._client.key_value_set(self._key, f"{beat} {self._reader.replayed}", allow_overwrite=True)
            except Exception:  # the coordinator (in the leader) is gone: the main thread will see it too
                return


class Watchdog(threading.Thread):
    """The leader's watch over its followers' heartbeats: `on_silence(process, message)` once,
    when one has not beaten for `timeout` seconds; meanwhile it deletes what all have replayed."""

    def __init__(self, client, num_processes: int, log_: OperationLog, timeout: float,
                 on_silence: Callable[[int, str], None]) -> None:
        super().__init__(name="flint-watchdog", daemon=True)
        self._client, self._log, self._timeout, self._on_silence = client, log_, timeout, on_silence
        now = time.monotonic()
        # Per follower: its last beat seen, and when it changed (by this process's clock).
        self._last = {process: (None, now) for process in range(1, num_processes)}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_INTERVAL):
            silent = self._check()
            if silent:
                self._on_silence(*silent)
                return

    def _check(self) -> tuple[int, str] | None:
        now, replayed = time.monotonic(), []
        for process, (seen, since) in self._last.items():
            value = self._beat(process)
            if value != seen:
                self._last[process] = (value, now)
            elif now - since > self._timeout:
                return process, (f"follower process {process} stopped answering: no heartbeat for "
                                 f"{now - since:.0f} s (its last: {seen or 'none'})")
            replayed.append(replayed_count(value))
        self._log.forget_before(min(replayed, default=0))
        return None

    def _beat(self, process: int) -> str | None:
        try:
            return self._client.key_value_try_get(HEARTBEAT_KEY.format(process))
        except Exception:  # NOT_FOUND: it has not beaten yet (still loading)
            return None


def replayed_count(heartbeat: str | None) -> int:
    """How many operations a heartbeat ("beat replayed") says its follower has replayed."""
    parts = (heartbeat or "").split()
    return int(parts[1]) if len(parts) == 2 else 0


def replay(runner, operation: tuple, state: dict) -> None:
    """Run one of the leader's operations on a follower's runner. `state` keeps the last
    launch, which a chained decode window continues (the leader chains only its last)."""
    kind, *arguments = operation
    if kind == "dispatch":
        batch, num_steps = arguments
        # Every bucket was compiled at start-up, in the leader's order: compiling one now
        # would put a transfer across processes out of step with the leader's (launch
        # refuses a bucket that is not compiled instead).
        state["flight"] = runner.launch(batch, num_steps)
    elif kind == "dispatch_next":
        tables, num_steps = arguments
        state["flight"] = runner.launch_next(state["flight"], tables, num_steps)
    elif kind in ("copy_pages", "load_adapter", "load_weights", "release_kv_cache",
                  "release_weights", "restore_kv_cache"):
        getattr(runner, kind)(*arguments)
    else:
        raise ValueError(f"unknown operation {kind!r} from the leader")


def follow(runner, reader: OperationReader, should_stop: Callable[[], bool]) -> None:
    """A follower's life after loading: replay the leader's operations until it says stop."""
    state: dict = {}
    while (operation := reader.next(should_stop)) != STOP:
        replay(runner, operation, state)
        reader.replayed += 1
