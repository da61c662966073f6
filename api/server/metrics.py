"""Prometheus metrics: request counters and latency histograms, engine gauges read at scrape time.

Each app owns a CollectorRegistry rather than using the process-wide default, so several apps
in one process (the tests) keep separate counts. Names follow vLLM's (`vllm:` becomes `flint:`);
a ':' is valid in Prometheus metric names. The families that Kubernetes gateways and
autoscalers read (the Gateway API Inference Extension, KEDA, ...) are also exposed under their
vLLM names, with vLLM's `model_name` and `engine` labels: re-emitted from the same metrics at
scrape time, so both names always agree and each observation is recorded once. The registry
also has the process collector (`process_resident_memory_bytes`, ...), which only the default
registry has on its own."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from api.server.engine_health import EngineHealth
from engine.engine import EngineStats

# The text exposition format every Prometheus version scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. A CPU server's first token can take tens of seconds under load, a GPU's milliseconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)

FLINT_PREFIX, VLLM_PREFIX = "flint:", "vllm:"


class Metrics:
    """The server's Prometheus metrics; `ServerState.metrics`. `model_name`: the served
    model's id, the `model_name` label of the vLLM-named families."""

    def __init__(self, model_name: str = "") -> None:
        self.registry = CollectorRegistry()
        self._running = self._gauge("num_requests_running", "Requests the engine is computing now.")
        self._waiting = self._gauge("num_requests_waiting", "Requests queued for the engine.")
        self._kv_usage = self._gauge("kv_cache_usage_perc", "Fraction of KV-cache pages in use, 0 to 1.")
        self._pages_in_use = self._gauge("kv_cache_pages_in_use", "KV-cache pages held by sequences.")
        self._pages_cached = self._gauge("kv_cache_pages_cached",
                                         "KV-cache pages holding a prefix-cache entry, held or evictable.")
        self._prompt_tokens = Counter("flint:prompt_tokens", "Prompt tokens of finished requests.",
                                      registry=self.registry)
        self._generation_tokens = Counter("flint:generation_tokens", "Generated tokens of finished requests.",
                                          registry=self.registry)
        # Start-up compiles every program serving needs (api/server/lifecycle.py): one made later
        # stalled the steps waiting for it. tools/soak.py fails a soak during which this grew.
        self._compiled_while_serving = Counter(
            "flint:programs_compiled_while_serving",
            "Programs compiled (or loaded from the compilation cache) while serving, outside start-up's compile.",
            registry=self.registry)
        self._ttft = self._histogram("time_to_first_token_seconds", "Time from arrival to the first token.",
                                     LATENCY_BUCKETS)
        self._tpot = self._histogram("time_per_output_token_seconds", "Mean time between a request's tokens.",
                                     PER_TOKEN_BUCKETS)
        self._e2e = self._histogram("e2e_request_latency_seconds", "Time from arrival to the last token.",
                                    LATENCY_BUCKETS)
        # How the engine serves (api/server/engine_health.py): what a slower-than-expected server
        # shows without its log.
        self._bucket_compiled = Gauge("flint:token_bucket_compiled",
                                      "1 for a token bucket compiled, 0 for one steps are padded past.",
                                      ["tokens"], registry=self.registry)
        self._compile_failed = self._gauge("bucket_compile_failed",
                                           "1 when compiling the buckets start-up left failed: they stay missing.")
        self._attention_fallback = Gauge("flint:attention_fallback",
                                         "1 when the attention kernel failed its start-up check and the reference "
                                         "serves instead; labelled with what was requested and what is in use.",
                                         ["requested", "in_use"], registry=self.registry)
        vllm_named = [self._running, self._waiting, self._kv_usage, self._prompt_tokens, self._generation_tokens,
                      self._ttft, self._tpot, self._e2e]
        self.registry.register(VllmNames(vllm_named, {"model_name": model_name, "engine": "0"}))
        ProcessCollector(registry=self.registry)

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

    def count_program_compiled_while_serving(self) -> None:
        self._compiled_while_serving.inc()

    def render(self, load: EngineStats, engine: EngineHealth | None = None) -> bytes:
        """The exposition text, with the gauges set to `load` and `engine` (read by the caller
        just now; `engine` None: not loaded yet)."""
        self._running.set(load.num_running)
        self._waiting.set(load.num_waiting)
        self._kv_usage.set(load.kv_cache_usage)
        self._pages_in_use.set(load.num_pages_in_use)
        self._pages_cached.set(load.num_cached_pages)
        if engine is not None:
            self._set_engine_health(engine)
        return generate_latest(self.registry)

    def _set_engine_health(self, engine: EngineHealth) -> None:
        for bucket in engine.buckets:
            self._bucket_compiled.labels(tokens=str(bucket)).set(0 if bucket in engine.missing else 1)
        self._compile_failed.set(engine.compile_error is not None)
        choice = engine.attention
        self._attention_fallback.clear()  # one sample, labelled with the current choice
        self._attention_fallback.labels(requested=choice.requested, in_use=choice.in_use).set(
            choice.fallback is not None)

    def _gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(f"{FLINT_PREFIX}{name}", documentation, registry=self.registry)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(f"{FLINT_PREFIX}{name}", documentation, buckets=buckets, registry=self.registry)


class VllmNames(Collector):
    """Flint's `sources` again under their `vllm:` names, each sample with `labels` added."""

    def __init__(self, sources: list[Collector], labels: dict[str, str]) -> None:
        self.sources = sources
        self.labels = labels

    def collect(self) -> Iterable[Metric]:
        for source in self.sources:
            for family in source.collect():
                yield renamed(family, self.labels)


def renamed(family: Metric, labels: dict[str, str]) -> Metric:
    copy = Metric(vllm_name(family.name), family.documentation, family.type, family.unit)
    copy.samples = [sample._replace(name=vllm_name(sample.name), labels={**labels, **sample.labels})
                    for sample in family.samples]
    return copy


def vllm_name(name: str) -> str:
    return VLLM_PREFIX + name.removeprefix(FLINT_PREFIX)
