"""Predicted outputs (api/core/prediction.py): `prediction` and `speculation` in every form
leave the answer as it is, and the usage and perf metrics count the drafts kept.

The app computes every step in one bucket, so the answers with and without drafts come from
identical shapes (engine/verification.py: the identity is exact for equal shapes)."""

from __future__ import annotations

import pytest
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from chat_helpers import MODEL_ID
from litestar.testing import TestClient
from loop_helpers import on_event_loop

from api.server.settings import Settings

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


@pytest.fixture
def encoded_texts(client, monkeypatch) -> dict[str, bool]:
    """Each text the served tokenizer encodes, and whether it was encoded on the event loop
    (a thread with a running loop) rather than in a worker thread."""
    tokenizer = client.app.state.server.tokenizer
    encode, seen = tokenizer.encode, {}

    def watched_encode(text, *args, **kwargs):
        seen[text] = seen.get(text, False) or on_event_loop()
        return encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", watched_encode)
    return seen


PREDICTED = "the predicted answer, encoded off the event loop"


@pytest.mark.parametrize("path, fields", [
    (COMPLETIONS, {"prompt": "Hi", "max_tokens": 2, "prediction": PREDICTED}),
    (CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
            "prediction": {"type": "content", "content": [{"type": "text", "text": PREDICTED}]}}),
    (CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "speculation": PREDICTED}),
])
def test_a_prediction_is_encoded_in_a_worker_thread(client, encoded_texts, path, fields):
    """Encoding a prediction as large as the body limit takes seconds: on the event loop it
    would stall every other request meanwhile."""
    response = client.post(path, json={"model": MODEL_ID, **fields})
    assert response.status_code == 200, response.text
    assert encoded_texts.get(PREDICTED) is False, "the prediction was encoded on the event loop, or not at all"


@pytest.mark.parametrize("path, name, as_field", [
    (COMPLETIONS, "prediction", lambda text: text),
    (COMPLETIONS, "speculation", lambda text: text),
    (CHAT, "prediction", lambda text: {"type": "content", "content": text}),
    (CHAT, "speculation", lambda text: text),
], ids=["completions-prediction", "completions-speculation", "chat-prediction", "chat-speculation"])
def test_a_prediction_too_long_for_the_context_is_refused_unencoded(client, encoded_texts, path, name, as_field):
    """No text of more bytes than the context window's tokens can hold fits, whatever it
    would encode to: such a prediction is a 400 before any second is spent encoding it."""
    server = client.app.state.server
    text = "x" * (server.max_model_len * server.max_token_bytes + 1)
    prompt = {"prompt": "Hi"} if path == COMPLETIONS else {"messages": [{"role": "user", "content": "Hi"}]}
    response = client.post(path, json={"model": MODEL_ID, **prompt, "max_tokens": 2, name: as_field(text)})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == name
    assert text not in encoded_texts, "the prediction was encoded before its size was checked"
