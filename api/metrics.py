"""Prometheus metrics: request counters and latency histograms, engine gauges read at scrape time.

Each app owns a CollectorRegistry rather than using the process-wide default, so several apps
in one process (the tests) keep separate counts. Names follow vLLM's (`vllm:` becomes `flint:`);
a ':' is valid in Prometheus metric names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.engine import EngineStats

# The text exposition format every Prometheus version scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. A CPU server's first token can take tens of seconds under load, a GPU's milliseconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)


class Metrics:
    """The server's Prometheus metrics; `ServerState.metrics`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._running = self._gauge("num_requests_running", "Requests the engine is computing now.")
        self._waiting = self._gauge("num_requests_waiting", "Requests queued for the engine.")
        self._kv_usage = self._gauge("kv_cache_usage_perc", "Fraction of KV-cache pages in use, 0 to 1.")
        self._prompt_tokens = Counter("flint:prompt_tokens", "Prompt tokens of finished requests.",
                                      registry=self.registry)
        self._generation_tokens = Counter("flint:generation_tokens", "Generated tokens of finished requests.",
                                          registry=self.registry)
        self._ttft = self._histogram("time_to_first_token_seconds", "Time from arrival to the first token.",
                                     LATENCY_BUCKETS)
        self._tpot = self._histogram("time_per_output_token_seconds", "Mean time between a request's tokens.",
                                     PER_TOKEN_BUCKETS)
        self._e2e = self._histogram("e2e_request_latency_seconds", "Time from arrival to the last token.",
                                    LATENCY_BUCKETS)

    def record_request(self, *, prompt_tokens: int, generation_tokens: int,
                       time_to_first_token: float | None, time_per_output_token: float | None,
                       e2e_latency: float) -> None:
        """Count one finished request (also an aborted one: its tokens were computed).

        Times in seconds; None where there is nothing to measure (no token generated, or
        only one so there is no gap between tokens)."""
        self._prompt_tokens.inc(prompt_tokens)
        self._generation_tokens.inc(generation_tokens)
        if time_to_first_token is not None:
            self._ttft.observe(time_to_first_token)
        if time_per_output_token is not None:
            self._tpot.observe(time_per_output_token)
        self._e2e.observe(e2e_latency)

    def render(self, load: EngineStats) -> bytes:
        """The exposition text, with the gauges set to `load` (read by the caller just now)."""
        self._running.set(load.num_running)
        self._waiting.set(load.num_waiting)
        self._kv_usage.set(load.kv_cache_usage)
        return generate_latest(self.registry)

    def _gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(f"flint:{name}", documentation, registry=self.registry)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(f"flint:{name}", documentation, buckets=buckets, registry=self.registry)
