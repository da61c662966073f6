"""`flint serve` across several processes: the flags, the followers' life, and the leader's
link to them (the engine side is engine/device/multihost.py).

Every process runs the same command with its own `--process-id`. Process 0 serves HTTP;
the others load the model, compile the same programs in the same order (every bucket,
before the leader turns healthy: nothing compiles in the background in a group) and
replay the leader's device operations until it tells them to stop. Each follower's exit
status follows the group's: 0 when the leader stopped it, 1 when the leader vanished."""

from __future__ import annotations

import argparse
import logging
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.device.multihost import (
    HEARTBEAT_KEY,
    STOP,
    Heartbeat,
    OperationLog,
    OperationReader,
    Topology,
    Watchdog,
    coordination_client,
    follow,
    initialize,
    leave_group,
)

if TYPE_CHECKING:
    from api.server.settings import Settings
    from engine.device.runner import ModelRunner

log = logging.getLogger("flint")

DEFAULT_FOLLOWER_TIMEOUT = 30.0  # seconds without a heartbeat before the leader gives a follower up
STOPPED = "stopped"  # a follower's last heartbeat value, once it has left in order
STOP_WAIT = 10.0  # seconds the leader waits for its followers to confirm the stop


def add_multihost_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--coordinator-address", metavar="HOST:PORT", default=None,
                       help="serve one model from several processes (hosts) with jax.distributed: the "
                            "address of process 0, where the coordination service listens (every "
                            "process gives the same one)")
    serve.add_argument("--num-processes", metavar="N", type=int, default=1,
                       help="processes in the group (default: %(default)s)")
    serve.add_argument("--process-id", metavar="I", type=int, default=0,
                       help="this process's rank, 0 to N-1; 0 serves HTTP, the others follow it "
                            "(default: %(default)s)")
    serve.add_argument("--follower-timeout", metavar="SECONDS", type=float, default=DEFAULT_FOLLOWER_TIMEOUT,
                       help="seconds without a follower's heartbeat before the leader stops serving "
                            "(503) and exits (default: %(default)s)")


def topology_from_args(args: argparse.Namespace) -> Topology | None:
    """The group these flags describe (None: a single process). Raises ValueError naming
    the flag that contradicts the others."""
    if args.num_processes < 1:
        raise ValueError("--num-processes must be at least 1")
    if args.num_processes == 1 and args.coordinator_address is None:
        if args.process_id != 0:
            raise ValueError("--process-id needs --num-processes above 1")
        return None
    if args.coordinator_address is None:
        raise ValueError("--num-processes above 1 needs --coordinator-address HOST:PORT")
    host, _, port = args.coordinator_address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--coordinator-address must be HOST:PORT, not {args.coordinator_address!r}")
    if not 0 <= args.process_id < args.num_processes:
        raise ValueError(f"--process-id must lie in [0, {args.num_processes - 1}]")
    if args.follower_timeout <= 0:
        raise ValueError("--follower-timeout must be positive")
    return Topology(args.coordinator_address, args.num_processes, args.process_id)


def join_group(topology: Topology, follower_timeout: float) -> None:
    log.info("process %d of %d joining the group at %s", topology.process_id, topology.num_processes,
             topology.coordinator_address)
    initialize(topology, follower_timeout)


def run_follower(settings: Settings, load: Callable[[Settings], object]) -> int:
    """A follower's life: load and compile the model, then replay the leader's operations.
    SIGTERM does not end it at once: the leader may still be draining requests that need
    it, so it waits for the leader's stop, at most the shutdown timeout and a margin."""
    client = coordination_client()
    reader = OperationReader(client)
    heartbeat = Heartbeat(client, settings.topology.process_id, reader)
    heartbeat.start()  # beats while the model loads and compiles, too
    deadline = StopDeadline(settings.shutdown_timeout + STOP_WAIT)
    try:
        engine = load(settings)  # every bucket, in the leader's order (api/server/lifecycle.py load_engine)
        log.info("following the leader at %s", settings.topology.coordinator_address)
        follow(engine.runner, reader, deadline.passed)
    except Exception:
        log.exception("the group failed: this follower stops")
        return 1
    finally:
        heartbeat.stopped.set()
    client.key_value_set(HEARTBEAT_KEY.format(settings.topology.process_id), STOPPED, allow_overwrite=True)
    # Disconnect now, while the leader waits for that STOPPED: left to JAX's exit hook, the
    # disconnect could reach the coordination service after the leader (its host) has gone,
    # and a disconnect that fails aborts the process.
    leave_group()
    log.info("the leader stopped the group: exiting")
    return 0


class StopDeadline:
    """Installed as the SIGTERM and SIGINT handler: the first signal sets a deadline `grace`
    seconds on, a second one ends the wait at once."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.at: float | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, _sig, _frame) -> None:
        self.at = time.monotonic() + self.grace if self.at is None else 0.0
        log.info("told to stop: waiting for the leader's stop (at most %.0f s)", self.grace)

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() > self.at


class LeaderLink:
    """The leader's side of the group: publishes its runner's operations, watches its
    followers, and stops them when the server stops."""

    def __init__(self, topology: Topology, follower_timeout: float) -> None:
        self.topology = topology
        self.follower_timeout = follower_timeout
        self._client = coordination_client()
        self._log = OperationLog(self._client)
        self._watchdog: Watchdog | None = None
        self.lost: set[int] = set()  # followers that stopped answering: the engine thread may be blocked for good

    def attach(self, runner: ModelRunner, on_lost: Callable[[str], None]) -> None:
        """(Before the engine's first step.) From now on `runner` publishes what it runs."""
        runner.publish = self._log.publish

        def lost(process: int, message: str) -> None:
            self.lost.add(process)
            on_lost(message)

        self._watchdog = Watchdog(self._client, self.topology.num_processes, self._log, self.follower_timeout, lost)
        self._watchdog.start()

    def stop(self) -> None:
        """Tell every follower to stop, and wait (a little) until each says it has."""
        if self._watchdog is not None:
            self._watchdog.stopped.set()
        try:
            self._log.publish(STOP)
        except Exception:  # the coordination service is failing: the followers see it too
            log.exception("could not tell the followers to stop")
            return
        waiting = set(range(1, self.topology.num_processes)) - self.lost
        deadline = time.monotonic() + STOP_WAIT
        while waiting and time.monotonic() < deadline:
            waiting = {process for process in waiting if not self._has_stopped(process)}
            time.sleep(0.1)
        if waiting:
            log.warning("followers %s did not confirm the stop", sorted(waiting))

    def _has_stopped(self, process: int) -> bool:
        try:
            return self._client.key_value_try_get(HEARTBEAT_KEY.format(process)) == STOPPED
        except Exception:
            return False
