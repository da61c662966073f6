"""tools/soak/report.py's checks on the server's /metrics, without a server: a program compiled
while any request of the soak ran fails it (warm-up or load), as does a /metrics without the
count."""

from __future__ import annotations

import pytest

from tools.soak.report import COMPILED, RSS, Report

MB = 1024 * 1024


def metrics(compiled: float) -> dict[str, float]:
    return {COMPILED: compiled, RSS: 300 * MB, "flint:kv_cache_pages_in_use": 0}


def report(start: float, before: float, after: float) -> Report:
    return Report([], [], 1.0, metrics(start), metrics(before), metrics(after), memory_tolerance=0.1)


def test_nothing_compiled_while_serving_passes():
    # Programs compiled before the soak (an earlier client's) are not the soak's.
    assert report(3, 3, 3).failures() == []
    assert "programs compiled while serving: 0 during the soak" in report(3, 3, 3).summary()


@pytest.mark.parametrize(("start", "before", "after", "words"), [
    (0, 1, 1, "1 programs compiled while serving (1 during the warm-up, 0 under the load"),
    (2, 2, 4, "2 programs compiled while serving (0 during the warm-up, 2 under the load"),
])
def test_a_program_compiled_during_the_soak_fails_it(start, before, after, words):
    [failure] = report(start, before, after).failures()
    assert failure.startswith(words)


def test_a_server_without_the_count_fails():
    without = {RSS: 300 * MB}
    [failure] = Report([], [], 1.0, without, without, without, memory_tolerance=0.1).failures()
    assert failure == f"the server's /metrics has no {COMPILED}"


def test_a_server_busy_before_the_warm_up_fails():
    [failure] = Report([], [], 1.0, None, metrics(0), metrics(0), memory_tolerance=0.1).failures()
    assert failure == "the server did not go idle before the warm-up"
