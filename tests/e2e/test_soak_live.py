"""A short soak (tools/soak.py) against the session's live server: a mixed load of every
dialect, with dropped streams and bad bodies, leaves no 5xx, no unfinished answer, no KV
page held and no memory growth past 10%. The full run (1,000 requests and more) is
`python tools/soak.py URL` against a `flint serve` on a quiet machine."""

from __future__ import annotations

from tools.soak import main, run
from tools.soak_requests import DIALECTS

NUM_REQUESTS = 120
SHORT = ["--requests", str(NUM_REQUESTS), "--concurrency", "8", "--max-tokens", "6"]


def test_a_short_soak_passes_every_check(live_server):
    report = run([live_server, *SHORT])
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
    assert report.after["process_resident_memory_bytes"] > 0


def test_the_soak_fails_what_it_should(live_server, capsys):
    """A positive control: a tolerance no server can meet (resident memory must shrink by
    half) makes the soak fail, say why, and exit 1."""
    assert main([live_server, "--requests", "4", "--max-tokens", "2", "--memory-tolerance", "-0.5"]) == 1
    output = capsys.readouterr().out
    assert "FAILED: resident memory grew" in output and "soak: FAILED" in output
