"""/metrics: Prometheus text with request counters, latency histograms and engine gauges,
under Flint's names and again under vLLM's (labelled with the model), and the process's
own figures."""

from __future__ import annotations

import pytest
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families
from tiny_models import tiny_checkpoint

from api.server.metrics import Metrics
from api.server.settings import Settings
from engine.engine import Engine, EngineStats
from engine.host.request import Request, SamplingParams, StopCriteria

GAUGES = ("flint:num_requests_running", "flint:num_requests_waiting", "flint:kv_cache_usage_perc")
COUNTERS = ("flint:prompt_tokens", "flint:generation_tokens")
HISTOGRAMS = ("flint:time_to_first_token_seconds", "flint:time_per_output_token_seconds",
              "flint:e2e_request_latency_seconds")
# The prefix cache's lookups and hits, in tokens: counted by the engine, read at scrape time.
PREFIX_CACHE = ("flint:prefix_cache_queries", "flint:prefix_cache_hits")
# What gateways and autoscalers read: every family above, under its vLLM name.
VLLM_FAMILIES_AS_FLINT = GAUGES + COUNTERS + HISTOGRAMS + PREFIX_CACHE
VLLM_FAMILIES = tuple(name.replace("flint:", "vllm:") for name in VLLM_FAMILIES_AS_FLINT)
# vLLM's LoRA info gauge (the gateway's endpoint picker reads it): labelled with the adapters too.
LORA_INFO = "flint:lora_requests_info"


def samples(text: str) -> dict[str, float]:
    """Every sample by name (histogram buckets by name and bound), parsed as Prometheus does."""
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            bound = sample.labels.get("le")
            values[sample.name if bound is None else f"{sample.name}{{le={bound}}}"] = sample.value
    return values


@pytest.fixture(scope="module")
def client(tiny_app_factory):
    with TestClient(app=tiny_app_factory(Settings(engine=ONE_BUCKET_ENGINE))) as client:
        wait_until_serving(client)
        yield client


def labels_by_family(text: str) -> dict[str, list[dict[str, str]]]:
    """Each family's samples' labels, histogram bounds left out."""
    return {family.name: [{key: value for key, value in sample.labels.items() if key != "le"}
                          for sample in family.samples] for family in text_string_to_metric_families(text)}


def scrape_text(client) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def scrape(client) -> dict[str, float]:
    return samples(scrape_text(client))


def vllm_samples(values: dict[str, float]) -> dict[str, float]:
    """The vllm: samples under the flint: names they stand for."""
    return {name.replace("vllm:", "flint:", 1): value for name, value in values.items() if name.startswith("vllm:")}


def test_every_metric_is_exposed_and_idle(client):
    values = scrape(client)
    for gauge in GAUGES:
        assert values[gauge] == 0
    for counter in COUNTERS + PREFIX_CACHE:
        assert f"{counter}_total" in values
    for histogram in HISTOGRAMS:
        assert f"{histogram}_count" in values and f"{histogram}_sum" in values
    assert values["process_resident_memory_bytes"] > 0  # the process collector is in the app's registry


def test_the_vllm_names_carry_the_model_name(client):
    model_id = client.get("/v1/models").json()["data"][0]["id"]
    families = labels_by_family(scrape_text(client))
    for family in VLLM_FAMILIES:
        assert families[family], family
        assert all(labels == {"model_name": model_id, "engine": "0"} for labels in families[family]), family
    # Flint's own names stay unlabelled, as before.
    assert all(labels == {} for labels in families["flint:num_requests_running"])


def test_a_completion_is_counted(client):
    before = scrape(client)
    response = client.post("/v1/completions", json={"prompt": "Count these tokens", "max_tokens": 4,
                                                    "ignore_eos": True, "n": 2})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    after = scrape(client)

    def grew(name: str) -> float:
        return after[name] - before[name]

    # Each of the n choices is one engine request, with its own prompt tokens.
    assert grew("flint:prompt_tokens_total") == 2 * usage["prompt_tokens"]
    assert grew("flint:generation_tokens_total") == usage["completion_tokens"] == 8
    for histogram in HISTOGRAMS:
        assert grew(f"{histogram}_count") == 2
        assert grew(f"{histogram}_sum") > 0
    assert after["flint:time_to_first_token_seconds_sum"] <= after["flint:e2e_request_latency_seconds_sum"]
    assert after["flint:num_requests_running"] == 0 and after["flint:kv_cache_usage_perc"] == 0
    assert after["flint:kv_cache_pages_in_use"] == 0
    # The vLLM names agree with Flint's, sample for sample, after the request too.
    flint_named = {name: value for name, value in after.items()
                   if name.startswith((*VLLM_FAMILIES_AS_FLINT, LORA_INFO))}
    assert vllm_samples(after) == flint_named
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 8


def test_the_lora_info_names_the_adapters_of_running_and_waiting_requests():
    text = Metrics("m").render(EngineStats(2, 1, 0.5, running_adapters=("a", "b"), waiting_adapters=("c",),
                                           max_loras=4)).decode()
    families = labels_by_family(text)
    for family in (LORA_INFO, LORA_INFO.replace("flint:", "vllm:")):
        (labels,) = families[family]
        assert {key: labels[key] for key in ("running_lora_adapters", "waiting_lora_adapters", "max_lora")} == {
            "running_lora_adapters": "a,b", "waiting_lora_adapters": "c", "max_lora": "4"}
    assert samples(text)[LORA_INFO] > 1.7e9  # the time of the reading, as vLLM's


def phases(text: str) -> dict[str, float]:
    """flint:server_phase's value by phase."""
    (family,) = [family for family in text_string_to_metric_families(text) if family.name == "flint:server_phase"]
    return {sample.labels["phase"]: sample.value for sample in family.samples}


def test_the_server_phase_is_health_s_status(client):
    assert client.get("/health").json()["status"] == "ok"
    assert phases(scrape_text(client)) == {"starting": 0, "ok": 1, "draining": 0, "failed": 0}


def test_the_server_phase_follows_each_render():
    metrics, idle = Metrics(), EngineStats(num_running=0, num_waiting=0, kv_cache_usage=0.0)
    assert phases(metrics.render(idle).decode()) == {}  # no phase told, none shown
    assert phases(metrics.render(idle, phase="starting").decode())["starting"] == 1
    assert phases(metrics.render(idle, phase="failed").decode()) == {"starting": 0, "ok": 0, "draining": 0,
                                                                     "failed": 1}
    assert phases(metrics.render(idle).decode())["failed"] == 1  # kept until told another


def test_record_request_fills_counters_and_histograms():
    metrics = Metrics()
    metrics.record_request(prompt_tokens=7, generation_tokens=3, time_to_first_token=0.2,
                           time_per_output_token=0.05, e2e_latency=0.3)
    # An aborted request before its first token: counted, with no token times to observe.
    metrics.record_request(prompt_tokens=5, generation_tokens=0, time_to_first_token=None,
                           time_per_output_token=None, e2e_latency=1.5)
    load = EngineStats(num_running=3, num_waiting=2, kv_cache_usage=0.25, num_pages_in_use=10, num_cached_pages=4)
    values = samples(metrics.render(load).decode())
    assert values["flint:prompt_tokens_total"] == 12 and values["flint:generation_tokens_total"] == 3
    assert values["flint:time_to_first_token_seconds_count"] == 1
    assert values["flint:time_to_first_token_seconds_sum"] == pytest.approx(0.2)
    assert values["flint:time_to_first_token_seconds_bucket{le=0.25}"] == 1
    assert values["flint:time_to_first_token_seconds_bucket{le=0.1}"] == 0
    assert values["flint:time_per_output_token_seconds_count"] == 1
    assert values["flint:e2e_request_latency_seconds_count"] == 2
    assert values["flint:e2e_request_latency_seconds_sum"] == pytest.approx(1.8)
    assert (values["flint:num_requests_running"], values["flint:num_requests_waiting"],
            values["flint:kv_cache_usage_perc"]) == (3, 2, 0.25)
    assert (values["flint:kv_cache_pages_in_use"], values["flint:kv_cache_pages_cached"]) == (10, 4)
    assert (values["vllm:num_requests_waiting"], values["vllm:prompt_tokens_total"]) == (2, 12)
    assert values["vllm:e2e_request_latency_seconds_sum"] == pytest.approx(1.8)


def test_each_app_counts_alone():
    first, second = Metrics(), Metrics()
    first.record_request(prompt_tokens=4, generation_tokens=1, time_to_first_token=None,
                         time_per_output_token=None, e2e_latency=0.1)
    idle = EngineStats(num_running=0, num_waiting=0, kv_cache_usage=0.0)
    assert samples(second.render(idle).decode())["flint:prompt_tokens_total"] == 0


def test_engine_stats_follow_the_scheduler(smollm2_tokenizer):
    config = ONE_BUCKET_ENGINE  # never compiled: only the scheduler and block manager run
    engine = Engine(tiny_checkpoint(smollm2_tokenizer.vocab_size), smollm2_tokenizer, config)
    assert engine.stats() == EngineStats(num_running=0, num_waiting=0, kv_cache_usage=0.0)
    for index in range(2):
        engine.add_request(Request(f"r{index}", list(range(10, 34)), SamplingParams(), StopCriteria(max_tokens=4),
                                   priority=index == 1))
    assert (engine.stats().num_waiting, engine.stats().num_priority_waiting) == (2, 1)
    engine.scheduler.schedule()  # both 24-token prompts fit the 64-token step
    pages_per_prompt = -(-24 // config.page_size)
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting, stats.num_priority_running) == (2, 0, 1)
    assert stats.kv_cache_usage == pytest.approx(2 * pages_per_prompt / (config.num_pages - 1))
    assert stats.num_pages_in_use == 2 * pages_per_prompt
    engine.abort("r0"), engine.abort("r1")
    # The prefix cache's lookups are counted for good: both prompts, none found.
    assert engine.stats() == EngineStats(num_running=0, num_waiting=0, kv_cache_usage=0.0,
                                         num_prefix_queried_tokens=2 * 24)
