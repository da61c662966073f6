"""Prometheus metrics: request counters and latency histograms, engine gauges read at scrape time.

Each app owns a CollectorRegistry rather than using the process-wide default, so several apps
in one process (the tests) keep separate counts. Names follow vLLM's (`vllm:` becomes `flint:`);
a ':' is valid in Prometheus metric names. The families that Kubernetes gateways and
autoscalers read (the Gateway API Inference Extension, KEDA, ...) are also exposed under their
vLLM names, with vLLM's `model_name` and `engine` labels: re-emitted from the same metrics at
scrape time, so both names always agree and each observation is recorded once. The registry
also has the process collector (`process_resident_memory_bytes`, ...), which only the default
registry has on its own.

Many tenants (api/core/tenancy.py): the queue depth and the latencies again per service
tier (`flint:tier_*`, labelled `tier` "priority" or "default": families of their own, so the
vLLM-named ones keep their series); the prefix cache's lookups and hits in tokens, all and those of sessions, with
the sessions live and the free pages kept for them (engine/host/sessions.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from api.server.engine_health import EngineHealth
from engine.engine import EngineStats

# The text exposition format every Prometheus version scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. A CPU server's first token can take tens of seconds under load, a GPU's milliseconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)

FLINT_PREFIX, VLLM_PREFIX = "flint:", "vllm:"
TIERS = ("priority", "default")  # api/core/tenancy.py's
PHASES = ("starting", "ok", "draining", "failed")  # api/core/state.py's Phase, /health's status


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
        self._add_tenancy_metrics()
        self._add_lora_metrics()
        self._add_encoder_metrics()
        self._weights_version = self._gauge("weights_version", "The version of the weights served: 0 as loaded at "
                                            "start, one more with each update (POST /v1/update_weights).")
        self._sleep_level = self._gauge("sleep_level", "0 awake; 1 with the KV cache's memory released; 2 with "
                                        "the weights' too (POST /sleep).")
        # How the engine serves (api/server/engine_health.py): what a slower-than-expected server
        # shows without its log.
        self._bucket_compiled = Gauge("flint:token_bucket_compiled",
                                      "1 for a token bucket compiled, 0 for one steps are padded past.",
                                      ["tokens"], registry=self.registry)
        self._compile_failed = self._gauge("bucket_compile_failed",
                                           "1 when compiling the buckets start-up left failed: they stay missing.")
        # A failed server exits soon after (`flint serve`), so "failed" may never be scraped:
        # the alerts also read "ok" staying 0 across restarts (deploy/prometheus/flint-rules.yaml).
        self._phase = Gauge("flint:server_phase", "1 for the server's phase now (starting, ok, draining or "
                            "failed: /health's status), 0 for the others.", ["phase"], registry=self.registry)
        self._attention_fallback = Gauge("flint:attention_fallback",
                                         "1 when the attention kernel failed its start-up check and the reference "
                                         "serves instead; labelled with what was requested and what is in use.",
                                         ["requested", "in_use"], registry=self.registry)
        vllm_named = [self._running, self._waiting, self._kv_usage, self._prompt_tokens, self._generation_tokens,
                      self._ttft, self._tpot, self._e2e, self._prefix_cache, self._lora_info]
        self.registry.register(VllmNames(vllm_named, {"model_name": model_name, "engine": "0"}))
        ProcessCollector(registry=self.registry)

    def _add_tenancy_metrics(self) -> None:
        tier = ["tier"]
        self._running_by_tier = Gauge("flint:tier_requests_running", "Requests the engine is computing now, "
                                      "by service tier.", tier, registry=self.registry)
        self._waiting_by_tier = Gauge("flint:tier_requests_waiting", "Requests queued for the engine, by "
                                      "service tier.", tier, registry=self.registry)
        self._ttft_by_tier = Histogram("flint:tier_time_to_first_token_seconds", "Time from arrival to the first "
                                       "token, by service tier.", tier, buckets=LATENCY_BUCKETS, registry=self.registry)
        self._e2e_by_tier = Histogram("flint:tier_e2e_request_latency_seconds", "Time from arrival to the last "
                                      "token, by service tier.", tier, buckets=LATENCY_BUCKETS, registry=self.registry)
        for name in TIERS:  # both series from the start, so a rate over either exists before its first request
            self._ttft_by_tier.labels(tier=name)
            self._e2e_by_tier.labels(tier=name)
        self._prefix_cache = EngineCounters({
            "prefix_cache_queries": ("Prompt tokens looked up in the prefix cache.", "num_prefix_queried_tokens"),
            "prefix_cache_hits": ("Prompt tokens found in the prefix cache.", "num_prefix_hit_tokens")})
        self._session_cache = EngineCounters({
            "session_prefix_cache_queries": ("Prompt tokens of requests in a session looked up in the prefix cache.",
                                             "num_session_queried_tokens"),
            "session_prefix_cache_hits": ("Prompt tokens of requests in a session found in the prefix cache.",
                                          "num_session_hit_tokens")})
        self.registry.register(self._prefix_cache)
        self.registry.register(self._session_cache)
        self._live_sessions = self._gauge("sessions_live", "Sessions seen within --session-ttl.")
        self._session_pages = self._gauge("kv_cache_pages_kept_for_sessions",
                                          "Free KV-cache pages of live sessions, evicted after every other free page.")

    def _add_lora_metrics(self) -> None:
        # vLLM's info gauge, which the Gateway API Inference Extension's endpoint picker reads
        # to send a request to a replica that has its adapter: the value is the time of the
        # reading, the adapters are labels (comma-separated names).
        self._lora_info = Gauge("flint:lora_requests_info", "LoRA adapters of running and waiting requests, and the "
                                "adapter slots; the value is the Unix time of the reading.",
                                ["running_lora_adapters", "waiting_lora_adapters", "max_lora"], registry=self.registry)
        self._lora_slots = EngineCounters({
            "lora_adapter_loads": ("LoRA adapters written into a device slot (a request's adapter was not in one).",
                                   "num_adapter_loads"),
            "lora_adapter_evictions": ("Of those, writes over another adapter (the least recently used).",
                                       "num_adapter_evictions")})
        self.registry.register(self._lora_slots)

    def _add_encoder_metrics(self) -> None:
        # The encoders served beside the chat model (api/embeddings/): vLLM counts a pooling
        # request among its generation requests, one model a server; here each encoder's
        # requests are their own series, by model and route, and the chat model's stay apart.
        labels = ["model", "route"]
        self._encoder_requests = Counter("flint:encoder_requests", "Embedding, rerank and score requests answered, "
                                         "by encoder model and route.", labels, registry=self.registry)
        self._encoder_tokens = Counter("flint:encoder_prompt_tokens", "Tokens the encoders read for those "
                                       "requests (a rerank's query with each document).", labels,
                                       registry=self.registry)
        self._encoder_latency = Histogram("flint:encoder_request_latency_seconds", "Time from an embedding, rerank "
                                          "or score request's arrival to its answer.", labels,
                                          buckets=LATENCY_BUCKETS, registry=self.registry)

    def serve_encoder(self, model: str, routes: Iterable[str]) -> None:
        """Every series of a served encoder from the start, so that a rate over any exists
        before its first request."""
        for route in routes:
            for family in (self._encoder_requests, self._encoder_tokens, self._encoder_latency):
                family.labels(model=model, route=route)

    def record_encoder_request(self, *, model: str, route: str, tokens: int, latency: float) -> None:
        self._encoder_requests.labels(model=model, route=route).inc()
        self._encoder_tokens.labels(model=model, route=route).inc(tokens)
        self._encoder_latency.labels(model=model, route=route).observe(latency)

    def _set_lora(self, load: EngineStats) -> None:
        self._lora_info.clear()  # one sample, labelled with the adapters now
        self._lora_info.labels(running_lora_adapters=",".join(load.running_adapters),
                               waiting_lora_adapters=",".join(load.waiting_adapters),
                               max_lora=str(load.max_loras)).set(time.time())
        self._lora_slots.load = load

    def record_request(self, *, prompt_tokens: int, generation_tokens: int,
                       time_to_first_token: float | None, time_per_output_token: float | None,
                       e2e_latency: float, tier: str = "default") -> None:
        """Count one finished request (also an aborted one: its tokens were computed) of
        service tier `tier`.

        Times in seconds; None where there is nothing to measure (no token generated, or
        only one so there is no gap between tokens)."""
        self._prompt_tokens.inc(prompt_tokens)
        self._generation_tokens.inc(generation_tokens)
        if time_to_first_token is not None:
            self._ttft.observe(time_to_first_token)
            self._ttft_by_tier.labels(tier=tier).observe(time_to_first_token)
        if time_per_output_token is not None:
            self._tpot.observe(time_per_output_token)
        self._e2e.observe(e2e_latency)
        self._e2e_by_tier.labels(tier=tier).observe(e2e_latency)

    def count_program_compiled_while_serving(self) -> None:
        self._compiled_while_serving.inc()

    def render(self, load: EngineStats, engine: EngineHealth | None = None, phase: str | None = None) -> bytes:
        """The exposition text, with the gauges set to `load`, `engine` and `phase` (read by the
        caller just now; `engine` None: not loaded yet; `phase` None: leave it as it was)."""
        self._running.set(load.num_running)
        self._waiting.set(load.num_waiting)
        self._kv_usage.set(load.kv_cache_usage)
        self._pages_in_use.set(load.num_pages_in_use)
        self._pages_cached.set(load.num_cached_pages)
        self._weights_version.set(load.weights_version)
        self._sleep_level.set(load.sleep_level)
        self._set_tenancy(load)
        self._set_lora(load)
        if engine is not None:
            self._set_engine_health(engine)
        if phase is not None:
            self._set_phase(phase)
        return generate_latest(self.registry)

    def _set_phase(self, phase: str) -> None:
        for name in PHASES:  # every phase's series, so an alert can read "ok" at 0
            self._phase.labels(phase=name).set(name == phase)

    def _set_tenancy(self, load: EngineStats) -> None:
        self._running_by_tier.labels(tier="priority").set(load.num_priority_running)
        self._running_by_tier.labels(tier="default").set(max(0, load.num_running - load.num_priority_running))
        self._waiting_by_tier.labels(tier="priority").set(load.num_priority_waiting)
        self._waiting_by_tier.labels(tier="default").set(max(0, load.num_waiting - load.num_priority_waiting))
        self._prefix_cache.load = self._session_cache.load = load
        self._live_sessions.set(load.num_live_sessions)
        self._session_pages.set(load.num_session_pages)

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


class EngineCounters(Collector):
    """Counters the engine keeps (EngineStats fields), exported as they stood at the last
    render: by name, (documentation, the EngineStats field)."""

    def __init__(self, counters: dict[str, tuple[str, str]]) -> None:
        self.counters = counters
        self.load: EngineStats | None = None

    def collect(self) -> Iterable[Metric]:
        for name, (documentation, field) in self.counters.items():
            value = getattr(self.load, field) if self.load is not None else 0
            yield CounterMetricFamily(FLINT_PREFIX + name, documentation, value=value)


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
