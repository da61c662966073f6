"""tools/soak.py's results: the checks a soak must pass, and its summary table."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from tools.soak.requests import Case

MB = 1024 * 1024
RSS = "process_resident_memory_bytes"
COMPILED = "flint:programs_compiled_while_serving_total"
PAGES_IN_USE, PAGES_CACHED = "flint:kv_cache_pages_in_use", "flint:kv_cache_pages_cached"


@dataclass(frozen=True)
class Result:
    """One request's outcome."""

    case: Case
    status: int | None  # None: no answer at all (a connection error, a timeout)
    seconds: float
    dropped: bool = False  # a stream closed by the soak after its first events
    problem: str | None = None  # what went wrong, None if nothing did


@dataclass(frozen=True)
class Report:
    warmup: list[Result]
    results: list[Result]
    seconds: float  # the load's wall time, warm-up excluded
    start: dict[str, float] | None  # /metrics once idle before the warm-up (None: it never was)
    before: dict[str, float] | None  # /metrics once idle after the warm-up (None: it never was)
    after: dict[str, float] | None  # /metrics once the load drained (None: it never did)
    memory_tolerance: float

    def failures(self) -> list[str]:
        """Every failed check, in words; empty when the soak passed."""
        failures = self._answer_failures()
        if self.start is None or self.before is None or self.after is None:
            when = ("before the warm-up" if self.start is None else "after the warm-up" if self.before is None
                    else "once the load ended")
            return [*failures, f"the server did not go idle {when}"]
        if self.after.get(PAGES_IN_USE, 0) or self.after.get("flint:kv_cache_usage_perc", 0):
            failures.append(f"{self.after.get(PAGES_IN_USE)} KV-cache pages still held once the load drained")
        return failures + self._compile_failures() + self._memory_failures()

    def _compile_failures(self) -> list[str]:
        """Programs the server made while any request of the soak ran, the warm-up's first
        requests of each kind included: start-up should have compiled every one."""
        if any(COMPILED not in metrics for metrics in (self.start, self.before, self.after)):
            return [f"the server's /metrics has no {COMPILED}"]
        in_warmup = self.before[COMPILED] - self.start[COMPILED]
        under_load = self.after[COMPILED] - self.before[COMPILED]
        if in_warmup or under_load:
            return [f"{in_warmup + under_load:.0f} programs compiled while serving ({in_warmup:.0f} during the "
                    f"warm-up, {under_load:.0f} under the load; the server's log names them)"]
        return []

    def _answer_failures(self) -> list[str]:
        everything = [*self.warmup, *self.results]
        num_5xx = sum(1 for result in everything if result.status is not None and result.status >= 500)
        failures = [f"{num_5xx} answers with a 5xx status"] if num_5xx else []
        by_case: dict[str, list[str]] = defaultdict(list)
        for result in everything:
            if result.problem is not None:
                by_case[result.case.name].append(result.problem)
        return failures + [f"{name}: {len(problems)} failed, e.g. {problems[0]}" for name, problems in by_case.items()]

    def _memory_failures(self) -> list[str]:
        if RSS not in self.before or RSS not in self.after:
            return [f"the server's /metrics has no {RSS}"]
        growth = self.after[RSS] / self.before[RSS] - 1
        if growth > self.memory_tolerance:
            return [f"resident memory grew by {growth:.1%} ({self.before[RSS] / MB:.0f} to {self.after[RSS] / MB:.0f} "
                    f"MB), more than {self.memory_tolerance:.0%}"]
        return []

    def summary(self) -> str:
        return "\n".join([*case_table(self.results), "", status_line(self.results), self._load_line(),
                          self._compile_line(), self._memory_line(), self._pages_line()])

    def _compile_line(self) -> str:
        if not self.start or not self.after or COMPILED not in self.start or COMPILED not in self.after:
            return "programs compiled while serving: unknown"
        return f"programs compiled while serving: {self.after[COMPILED] - self.start[COMPILED]:.0f} during the soak"

    def _load_line(self) -> str:
        rate = len(self.results) / self.seconds if self.seconds else 0.0
        return (f"load: {len(self.results)} requests in {self.seconds:.1f} s ({rate:.1f}/s), after a warm-up of "
                f"{len(self.warmup)}; {sum(r.dropped for r in self.results)} streams dropped mid-way")

    def _memory_line(self) -> str:
        if not self.before or not self.after or RSS not in self.before or RSS not in self.after:
            return "resident memory: unknown"
        before, after = self.before[RSS], self.after[RSS]
        return (f"resident memory: {before / MB:.1f} MB after the warm-up, {after / MB:.1f} MB after "
                f"({after / before - 1:+.1%})")

    def _pages_line(self) -> str:
        if not self.after:
            return "KV cache: the server did not drain"
        return (f"KV cache once drained: {self.after.get(PAGES_IN_USE, float('nan')):.0f} pages in use, "
                f"{self.after.get(PAGES_CACHED, float('nan')):.0f} kept by the prefix cache (free to take)")


def percentile(seconds: list[float], fraction: float) -> float:
    """Nearest rank; NaN for no values."""
    if not seconds:
        return float("nan")
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def case_table(results: list[Result]) -> list[str]:
    """One row per kind of request, then all together: counts and latency percentiles of
    the requests read to their end."""
    by_case: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_case[result.case.name].append(result)
    header = f"{'kind':<32}{'sent':>6}{'ok':>6}{'dropped':>9}{'failed':>8}{'p50 s':>8}{'p90 s':>8}{'p99 s':>8}"
    rows = [row(name, by_case[name]) for name in sorted(by_case)]
    return [header, *rows, row("all", results)]


def row(name: str, results: list[Result]) -> str:
    failed = sum(r.problem is not None for r in results)
    dropped = sum(r.dropped for r in results)
    times = [r.seconds for r in results if not r.dropped and r.problem is None]
    return (f"{name:<32}{len(results):>6}{len(results) - failed - dropped:>6}{dropped:>9}{failed:>8}"
            f"{percentile(times, 0.5):>8.2f}{percentile(times, 0.9):>8.2f}{percentile(times, 0.99):>8.2f}")


def status_line(results: list[Result]) -> str:
    counts = Counter("none" if r.status is None else str(r.status) for r in results)
    return "status codes: " + ", ".join(f"{status} x {count}" for status, count in sorted(counts.items()))
