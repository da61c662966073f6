"""The embedded all-MiniLM-L6-v2 served as `flint serve --embedding-model default` serves it,
through the `openai` SDK: 384-dimensional unit vectors equal to the NumPy forward of its
weights (tests/engine/bert_reference.py), cosine >= 0.9999."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import openai
import pytest
import safetensors.numpy
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from litestar.testing import TestClient

from api.server.settings import Settings
from engine.loader.sentence_transformers import EMBEDDED_EMBEDDER_ID, embedded_embedder_path
from tests.engine.bert_reference import bert_states, pooled

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The sky is blue and clear today.",
             "Flint serves embeddings beside its chat model."]


@pytest.fixture(scope="module")
def client(tiny_app_factory):
    # One batch size (the four sentences' bucket), not the served three: the vectors are the
    # same computation, for a third of the programs compiled.
    settings = Settings(engine=ONE_BUCKET_ENGINE, embedding_models=("default",), encoder_row_buckets=(8,))
    with TestClient(app=tiny_app_factory(settings)) as client:
        wait_until_serving(client)
        yield client


def test_the_embedded_minilm_serves_the_numpy_forward_s_vectors(client):
    sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0)
    got = np.array([item.embedding for item in sdk.embeddings.create(model=EMBEDDED_EMBEDDER_ID, input=SENTENCES).data])
    with zipfile.ZipFile(embedded_embedder_path()) as archive:
        config = json.loads(archive.read("config.json"))
        tensors = safetensors.numpy.load(archive.read("model.safetensors"))
    tokenizer = client.app.state.server.encoders[EMBEDDED_EMBEDDER_ID].checkpoint.tokenizer
    want = np.stack([pooled(bert_states(tensors, config, tokenizer.encode(text)), "mean", True) for text in SENTENCES])
    cosines = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert got.shape == (4, 384) and cosines.min() >= 0.9999, cosines
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    models = {model["id"]: model["task"] for model in client.get("/v1/models").json()["data"]}
    assert models[EMBEDDED_EMBEDDER_ID] == "embed"
