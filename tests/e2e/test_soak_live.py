"""A short soak (tools/soak.py) against the session's live server: a mixed load of every
dialect, with dropped streams and bad bodies, leaves no 5xx, no unfinished answer, no KV
page held, no program compiled while serving and no memory growth past 10%. The full run
(1,000 requests and more) is `python tools/soak.py URL` against a `flint serve` on a quiet
machine."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import numpy as np

import tools.soak.run as soak
from tools.soak.run import main, run
from tools.soak.report import COMPILED, RSS
from tools.soak.requests import DIALECTS

NUM_REQUESTS = 120
SHORT = ["--requests", str(NUM_REQUESTS), "--concurrency", "8", "--max-tokens", "6"]


def own_resident_bytes() -> int:
    """This process's resident memory as the kernel counts it (the live server runs here)."""
    [kilobytes] = re.findall(r"^VmRSS:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(kilobytes) * 1024


def test_a_short_soak_passes_every_check(live_server):
    report = run([live_server, *SHORT])
    resident = own_resident_bytes()
    print(report.summary())  # shown with -s, and on failure
    assert report.failures() == [], report.summary()
    results = report.results
    assert len(results) == NUM_REQUESTS
    assert {result.case.dialect for result in results} == set(DIALECTS)
    # The load had each kind of trouble it is meant to have, and it was answered as it should be.
    assert any(result.dropped for result in results)
    assert all(400 <= result.status < 500 for result in results if result.case.bad)
    assert any(result.case.stored for result in results)
    assert report.after["flint:kv_cache_pages_in_use"] == 0
    # Not one program compiled while any of the warm-up's and the load's requests ran.
    assert report.after[COMPILED] == report.before[COMPILED] == report.start[COMPILED]
    # The memory the soak checks is this process's own, in bytes, read a moment apart.
    assert 0.8 < report.after[RSS] / resident < 1.25, (report.after[RSS], resident)


def test_the_soak_fails_what_it_should(live_server, capsys):
    """A positive control: a tolerance no server can meet (resident memory must shrink by
    half) makes the soak fail, say why, and exit 1."""
    assert main([live_server, "--requests", "4", "--max-tokens", "2", "--memory-tolerance", "-0.5"]) == 1
    output = capsys.readouterr().out
    assert "FAILED: resident memory grew" in output and "soak: FAILED" in output


def test_the_soak_fails_a_program_compiled_while_serving(live_server, capsys, monkeypatch):
    """A positive control: a program compiled in the server's process while the warm-up's
    requests run (here by the soak's own thread, which shares the live server's process) is
    counted in its /metrics, and the soak fails saying so."""
    run_load = soak.run_load

    async def compiling_first(client, planned, concurrency):
        if not compiled:
            compiled.append(jax.jit(lambda x: x * 3.0 + 1.0)(np.arange(13.0)))  # a program never seen before
        return await run_load(client, planned, concurrency)

    compiled: list = []
    monkeypatch.setattr(soak, "run_load", compiling_first)
    assert main([live_server, "--requests", "4", "--max-tokens", "2"]) == 1
    output = capsys.readouterr().out
    assert re.search(r"FAILED: [1-9]\d* programs compiled while serving \([1-9]\d* during the warm-up, 0 under "
                     r"the load", output), output
    assert "soak: FAILED" in output
