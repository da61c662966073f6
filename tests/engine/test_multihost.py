"""The multi-host group's bookkeeping on a stand-in for the coordination service's
key-value store: operations published in order and replayed in order, heartbeats, the
watchdog that gives a silent follower up, and the flags that describe a group. (Two real
processes serving one model: tests/e2e/test_multihost_live.py.)"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pytest

from api.server.multihost import add_multihost_arguments, topology_from_args
from engine.device.multihost import (
    HEARTBEAT_KEY,
    OPERATION_KEY,
    STOP,
    OperationLog,
    OperationReader,
    Topology,
    Watchdog,
    replay,
    replayed_count,
)


class FakeStore:
    """The parts of jax.distributed's client the group uses, over a dict."""

    def __init__(self) -> None:
        self.values: dict[str, bytes | str] = {}

    def key_value_set_bytes(self, key: str, value: bytes) -> None:
        self.values[key] = value

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        assert allow_overwrite or key not in self.values
        self.values[key] = value

    def blocking_key_value_get_bytes(self, key: str, timeout_ms: int) -> bytes:
        if key not in self.values:
            raise RuntimeError("DEADLINE_EXCEEDED: no such key yet")
        return self.values[key]

    def key_value_try_get(self, key: str) -> str:
        if key not in self.values:
            raise RuntimeError("NOT_FOUND")
        return self.values[key]

    def key_value_delete(self, key: str) -> None:
        self.values.pop(key, None)


def test_a_follower_reads_the_operations_in_the_order_they_were_published():
    store = FakeStore()
    published = [("copy_pages", [(1, 2)]), ("dispatch_next", np.arange(4), 3), STOP]
    log = OperationLog(store)
    for operation in published:
        log.publish(operation)
    reader = OperationReader(store)
    received = []
    while (operation := reader.next(lambda: False)) != STOP:
        received.append(operation)
        reader.replayed += 1
    assert [kind for kind, *_ in received] == ["copy_pages", "dispatch_next"]
    assert received[1][1].tolist() == [0, 1, 2, 3]


def test_a_follower_waiting_for_work_stops_when_told():
    calls = []
    reader = OperationReader(FakeStore())
    assert reader.next(lambda: calls.append(1) or len(calls) > 2) == STOP
    assert len(calls) == 3  # it polled twice (timeouts), then saw the stop


def test_the_leader_forgets_only_what_every_follower_has_replayed():
    store, silences = FakeStore(), []
    log = OperationLog(store)
    for number in range(5):
        log.publish(("copy_pages", [(number, number)]))
    watchdog = Watchdog(store, 3, log, timeout=60, on_silence=lambda *silence: silences.append(silence))
    store.key_value_set(HEARTBEAT_KEY.format(1), "7 4", allow_overwrite=True)
    store.key_value_set(HEARTBEAT_KEY.format(2), "3 2", allow_overwrite=True)
    assert watchdog._check() is None
    assert [OPERATION_KEY.format(number) in store.values for number in range(5)] == [False, False, True, True, True]
    assert silences == []


def test_a_follower_whose_heartbeat_stops_is_given_up(monkeypatch):
    store = FakeStore()
    watchdog = Watchdog(store, 2, OperationLog(store), timeout=5, on_silence=lambda *_: None)
    store.key_value_set(HEARTBEAT_KEY.format(1), "1 0", allow_overwrite=True)
    assert watchdog._check() is None
    later = time.monotonic() + 4
    monkeypatch.setattr(time, "monotonic", lambda: later)
    store.key_value_set(HEARTBEAT_KEY.format(1), "2 0", allow_overwrite=True)
    assert watchdog._check() is None  # 4 s, and a new beat
    monkeypatch.setattr(time, "monotonic", lambda: later + 4)
    assert watchdog._check() is None  # 4 s since that beat
    monkeypatch.setattr(time, "monotonic", lambda: later + 6)
    process, message = watchdog._check()
    assert process == 1 and "follower process 1 stopped answering" in message and "2 0" in message


def test_a_follower_that_never_beats_is_given_up_too(monkeypatch):
    store = FakeStore()
    watchdog = Watchdog(store, 2, OperationLog(store), timeout=5, on_silence=lambda *_: None)
    later = time.monotonic() + 6
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert watchdog._check()[0] == 1


@pytest.mark.parametrize("heartbeat, count", [(None, 0), ("3 17", 17), ("stopped", 0)])
def test_a_heartbeat_says_how_far_its_follower_has_read(heartbeat, count):
    assert replayed_count(heartbeat) == count


class RecordingRunner:
    def __init__(self) -> None:
        self.calls = []

    def launch(self, batch, num_steps):
        self.calls.append(("launch", num_steps))
        return f"flight {len(self.calls)}"

    def launch_next(self, flight, tables, num_steps):
        self.calls.append(("next", flight, num_steps))
        return "next flight"

    def copy_pages(self, pairs):
        self.calls.append(("copy", pairs))


def test_replay_continues_the_last_launch_and_refuses_an_unknown_operation():
    # The runner has no compile method to call: a follower compiles every bucket at start-up,
    # in the leader's order, and never beside a step (issue 23).
    runner, state = RecordingRunner(), {}
    batch = argparse.Namespace(num_tokens=8)
    for operation in [("dispatch", batch, 1), ("dispatch_next", None, 4), ("copy_pages", [(3, 5)])]:
        replay(runner, operation, state)
    assert runner.calls == [("launch", 1), ("next", "flight 1", 4), ("copy", [(3, 5)])]
    with pytest.raises(ValueError, match="unknown operation 'reboot'"):
        replay(runner, ("reboot",), state)


def parsed(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_multihost_arguments(parser)
    return parser.parse_args(list(flags))


def test_no_group_flags_is_one_process():
    assert topology_from_args(parsed()) is None


def test_the_group_flags_make_a_topology():
    topology = topology_from_args(parsed("--coordinator-address", "10.0.0.1:8476", "--num-processes", "4",
                                         "--process-id", "3"))
    assert topology == Topology("10.0.0.1:8476", 4, 3) and not topology.is_leader


@pytest.mark.parametrize("flags, named", [
    (("--num-processes", "2"), "--coordinator-address"),
    (("--coordinator-address", "10.0.0.1", "--num-processes", "2"), "HOST:PORT"),
    (("--coordinator-address", "h:1", "--num-processes", "2", "--process-id", "2"), "--process-id"),
    (("--process-id", "1"), "--process-id"),
    (("--num-processes", "0"), "--num-processes"),
    (("--coordinator-address", "h:1", "--num-processes", "2", "--follower-timeout", "0"), "--follower-timeout"),
])
def test_contradicting_group_flags_name_the_flag(flags, named):
    with pytest.raises(ValueError, match=named):
        topology_from_args(parsed(*flags))
