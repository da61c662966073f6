"""The app skeleton: /health and /v1/models (and the /inference/v1 alias) over the embedded model."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from api.app import create_app
from api.settings import Settings
from api_helpers import TINY_ENGINE, wait_until_serving
from generated.flint import ErrorResponse, HealthResponse, ModelList

MODEL_ID = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def client(tiny_client):
    return tiny_client


def test_health_is_ok_once_started(client):
    response = client.get("/health")
    assert response.status_code == 200
    assert HealthResponse.model_validate(response.json()).status == "ok"


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
    app = tiny_app_factory(Settings(model=str(model_dir), engine=TINY_ENGINE))
    with TestClient(app=app) as client:
        wait_until_serving(client)
        data = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in data] == [("my-model", 128)]
