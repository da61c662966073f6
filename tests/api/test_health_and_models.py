"""The app skeleton: /health (and what it says of a degraded engine, with /metrics) and /v1/models
(and the /inference/v1 alias) over the embedded model."""

from __future__ import annotations

import time

import pytest
from api_helpers import ONE_BUCKET_ENGINE, TINY_ENGINE, wait_until_serving
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families
from tiny_models import tiny_checkpoint

import api.server.lifecycle as lifecycle
import engine.device.attention as attention
from api.server.app import create_app
from api.server.settings import Settings
from engine.config import EngineConfig
from engine.engine import Engine
from generated.flint import ErrorResponse, HealthResponse, ModelList

MODEL_ID = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def client(tiny_client):
    return tiny_client


def test_health_is_ok_once_started(client):
    response = client.get("/health")
    assert response.status_code == 200
    health = HealthResponse.model_validate(response.json())
    assert health.status == "ok"
    # The tiny app compiles every bucket before it serves, with the CPU's attention.
    assert health.buckets.missing == [] and health.buckets.error is None
    assert health.buckets.compiled == list(TINY_ENGINE.token_buckets)
    assert (health.attention.requested, health.attention.in_use, health.attention.fell_back) == (
        "auto", "reference", False)


# Three buckets: start-up compiles the essential two (16 and 64), the background the third.
THREE_BUCKETS = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, num_pages=160,
                             token_buckets=(16, 32, 64))


@pytest.fixture(scope="module")
def degraded(smollm2_tokenizer):
    """A tiny app whose background compile fails, on a "GPU" whose attention kernel fails
    its start-up check: it serves, slower, and /health and /metrics must say why."""
    checkpoint = tiny_checkpoint(smollm2_tokenizer.vocab_size)

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, settings.engine)
        engine.runner.warmup(buckets=engine.runner.essential_buckets())
        return engine

    def out_of_memory(engine):
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory compiling bucket 32")

    patch = pytest.MonkeyPatch()  # undone once the engine has loaded and its background compile ended
    patch.setattr(lifecycle, "compile_remaining", out_of_memory)
    patch.setattr(attention, "resolve", lambda name, *shape, **options: attention.MOSAIC_GPU)  # as `auto` on a GPU
    patch.setattr(attention, "kernel_problem", lambda *args: "RuntimeError: ptxas rejected it")
    with TestClient(app=create_app(Settings(engine=THREE_BUCKETS), engine_factory=engine_factory)) as client:
        try:
            wait_until_serving(client)
            deadline = time.monotonic() + 60
            while client.get("/health").json()["buckets"]["compiling"]:
                assert time.monotonic() < deadline, "the background compile did not end"
                time.sleep(0.05)
        finally:
            patch.undo()
        yield client


def test_health_says_which_buckets_a_failed_background_compile_left(degraded):
    response = degraded.get("/health")
    assert response.status_code == 200  # it still serves, padded into the 64-token bucket
    buckets = HealthResponse.model_validate(response.json()).buckets
    assert (buckets.compiled, buckets.missing, buckets.compiling) == ([16, 64], [32], False)
    assert buckets.error == "RuntimeError: RESOURCE_EXHAUSTED: out of memory compiling bucket 32"


def test_health_says_the_attention_fell_back(degraded):
    attention_ = HealthResponse.model_validate(degraded.get("/health").json()).attention
    assert (attention_.requested, attention_.in_use, attention_.fell_back) == ("auto", "reference", True)
    assert "ptxas rejected it" in attention_.reason and "mosaic_gpu" in attention_.reason


def test_metrics_show_the_failed_compile_and_the_fallback(degraded):
    families = {family.name: family.samples for family in text_string_to_metric_families(degraded.get("/metrics").text)}
    assert {sample.labels["tokens"]: sample.value for sample in families["flint:token_bucket_compiled"]} == {
        "16": 1, "32": 0, "64": 1}
    assert [sample.value for sample in families["flint:bucket_compile_failed"]] == [1]
    [fallback] = families["flint:attention_fallback"]
    assert fallback.labels == {"requested": "auto", "in_use": "reference"} and fallback.value == 1


def test_metrics_show_a_healthy_engine_as_such(client):
    families = {family.name: family.samples for family in text_string_to_metric_families(client.get("/metrics").text)}
    assert [sample.value for sample in families["flint:bucket_compile_failed"]] == [0]
    assert all(sample.value == 1 for sample in families["flint:token_bucket_compiled"])
    assert [(sample.labels, sample.value) for sample in families["flint:attention_fallback"]] == [
        ({"requested": "auto", "in_use": "reference"}, 0)]


def test_health_is_503_before_start():
    app = create_app(Settings())  # the embedded model: it is never loaded here
    # Without the context manager the lifespan never runs: the server is still starting.
    response = TestClient(app=app).get("/health")
    assert response.status_code == 503
    assert response.json() == {"status": "starting"}


@pytest.mark.parametrize("prefix", ["/v1", "/inference/v1"])
def test_models_lists_the_embedded_model(client, prefix):
    response = client.get(f"{prefix}/models")
    assert response.status_code == 200
    listing = ModelList.model_validate(response.json())
    assert listing.object == "list"
    assert [m.id for m in listing.data] == [MODEL_ID]
    model = listing.data[0]
    # The engine's max_model_len (TINY_ENGINE's), below the GGUF's 8192-token context.
    assert model.object == "model" and model.max_model_len == TINY_ENGINE.max_model_len
    # The checkpoint's name: where it lies on the server is not the client's business.
    assert model.root == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_model_is_retrieved_by_id(client):
    response = client.get(f"/v1/models/{MODEL_ID}")
    assert response.status_code == 200 and response.json()["id"] == MODEL_ID


def test_unknown_model_is_404_in_openai_shape(client):
    response = client.get("/v1/models/gpt-17")
    assert response.status_code == 404
    error = ErrorResponse.model_validate(response.json()).error
    assert error.param == "model" and error.code == "model_not_found" and "gpt-17" in error.message


def test_unknown_route_is_404_in_openai_shape(client):
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert ErrorResponse.model_validate(response.json()).error.type == "not_found_error"


def test_a_custom_model_is_served(tmp_path, tiny_app_factory):
    import json

    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    # A context shorter than the engine's max_model_len caps what is served.
    (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 128}))
    app = tiny_app_factory(Settings(model=str(model_dir), engine=ONE_BUCKET_ENGINE))
    with TestClient(app=app) as client:
        wait_until_serving(client)
        data = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in data] == [("my-model", 128)]
