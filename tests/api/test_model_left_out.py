"""A body without `model` (api/core/state.py `with_served_model`): served by the one model
where the server serves exactly one, in every dialect, as vLLM's and llama.cpp's servers do;
a 400 naming `model`, in the dialect's shape, where an adapter makes several to choose from."""

from __future__ import annotations

import pytest

from chat_helpers import MODEL_ID

HI = [{"role": "user", "content": "Say hi"}]
# route, a body without `model`, and what names the model in its answer
BODIES = {
    "/v1/chat/completions": {"messages": HI, "max_completion_tokens": 3},
    "/v1/completions": {"prompt": "Say hi", "max_tokens": 3},
    "/v1/responses": {"input": "Say hi", "max_output_tokens": 16},
    "/v1/messages": {"messages": HI, "max_tokens": 3},
}


@pytest.mark.parametrize("route", BODIES)
def test_a_body_without_a_model_is_served_by_the_one_model(client, route):
    response = client.post(route, json=BODIES[route])
    assert response.status_code == 200, response.text
    assert response.json()["model"] == MODEL_ID


class OneMoreModel:
    """An adapter in the registry for the duration: a second model to choose from."""

    def __init__(self, client):
        self.adapters = client.app.state.server.adapters.adapters

    def __enter__(self):
        self.adapters["another-model"] = object()

    def __exit__(self, *exc):
        del self.adapters["another-model"]


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/responses"])
def test_with_several_models_a_body_without_one_is_a_400_naming_model(client, route):
    with OneMoreModel(client):
        response = client.post(route, json=BODIES[route])
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "model"


def test_with_several_models_a_messages_body_without_one_is_an_anthropic_400(client):
    with OneMoreModel(client):
        response = client.post("/v1/messages", json=BODIES["/v1/messages"])
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "model" in error["error"]["message"]
