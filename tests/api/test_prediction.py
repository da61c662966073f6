"""Predicted outputs (api/core/prediction.py): `prediction` and `speculation` in every form
leave the answer as it is, and the usage and perf metrics count the drafts kept.

The app computes every step in one bucket, so the answers with and without drafts come from
identical shapes (engine/verification.py: the identity is exact for equal shapes)."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from api.settings import Settings
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from chat_helpers import MODEL_ID

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def client(tiny_app_factory):
    with TestClient(app=tiny_app_factory(Settings(engine=ONE_BUCKET_ENGINE))) as started:
        wait_until_serving(started)
        yield started


def complete(client, **fields) -> dict:
    response = client.post(COMPLETIONS, json={"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 20,
                                              "temperature": 0, "return_token_ids": True, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def chat(client, **fields) -> dict:
    response = client.post(CHAT, json={"model": MODEL_ID, "messages": [{"role": "user", "content": "Say hi"}],
                                       "max_completion_tokens": 16, "temperature": 0, **fields})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "top_p": 0.95, "seed": 7}],
                         ids=["greedy", "seeded"])
def test_speculation_token_ids_leave_the_completion_unchanged(client, sampling):
    plain = complete(client, **sampling)["choices"][0]
    token_ids = plain["token_ids"]
    predicted = complete(client, speculation=token_ids, perf_metrics_in_response=True, **sampling)
    assert predicted["choices"][0]["text"] == plain["text"]
    assert predicted["choices"][0]["token_ids"] == token_ids
    metrics = predicted["perf_metrics"]
    assert metrics["speculation-prompt-tokens"] == len(token_ids)
    # Each step, the prompt's included, checks up to 7 draft tokens and adds one of its own.
    assert metrics["speculation-prompt-matched-tokens"] >= len(token_ids) * 3 // 4
    assert metrics["speculation-generated-tokens"] == metrics["speculation-prompt-matched-tokens"]
    assert metrics["speculation-acceptance"][0] == 1.0


def test_a_wrong_speculation_is_counted_as_rejected(client):
    """Right for its first tokens, then wrong: what was right is kept, the rest rejected."""
    plain = complete(client)["choices"][0]
    wrong = plain["token_ids"][:4] + [(token + 1) % 1000 for token in plain["token_ids"][4:]]
    response = client.post(COMPLETIONS, json={"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 20,
                                              "temperature": 0, "speculation": wrong, "perf_metrics_in_response": True})
    body = response.json()
    assert body["choices"][0]["text"] == plain["text"]
    metrics = body["perf_metrics"]
    assert metrics["speculation-prompt-matched-tokens"] == 4  # checked from the prompt's own step on
    assert metrics["speculation-generated-tokens"] > 4
    assert response.headers["fireworks-speculation-prompt-matched-tokens"] == "4"


def test_a_prediction_string_or_content_on_completions(client):
    plain = complete(client)["choices"][0]
    for prediction in (plain["text"], {"type": "content", "content": plain["text"]}):
        predicted = complete(client, prediction=prediction)
        assert predicted["choices"][0]["text"] == plain["text"]


def test_a_chat_prediction_in_every_form_leaves_the_answer_unchanged(client, smollm2_tokenizer):
    plain = chat(client)
    answer = plain["choices"][0]["message"]["content"]
    details = plain["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] == details["rejected_prediction_tokens"] == 0
    as_ids = smollm2_tokenizer.encode(answer, add_special_tokens=False)
    forms = [{"prediction": {"type": "content", "content": answer}},
             {"prediction": {"type": "content", "content": [{"type": "text", "text": answer}]}},
             {"speculation": answer}, {"speculation": as_ids}]
    for form in forms:
        predicted = chat(client, **form)
        assert predicted["choices"][0]["message"]["content"] == answer, form
        details = predicted["usage"]["completion_tokens_details"]
        assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] > 0, form


def test_a_prediction_is_counted_in_a_streamed_usage_chunk(client):
    plain = complete(client)["choices"][0]
    response = client.post(CHAT, json={
        "model": MODEL_ID, "messages": [{"role": "user", "content": "Say hi"}], "max_completion_tokens": 16,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "speculation": plain["token_ids"]})
    assert response.status_code == 200
    assert '"accepted_prediction_tokens"' in response.text


@pytest.mark.parametrize("fields, param", [
    ({"prediction": "a", "speculation": "a"}, "speculation"),
    ({"speculation": [10**9]}, "speculation"),
    ({"prediction": {"type": "content", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}}, None),
])
def test_bad_predictions_are_400s_naming_the_field(client, fields, param):
    response = client.post(COMPLETIONS, json={"model": MODEL_ID, "prompt": "Hi", "max_tokens": 2, **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "speculation" in error["message"] or "prediction" in error["message"]
    if param:
        assert error["param"] == param
