"""/v1/embeddings, /v1/rerank and /v1/score (api/embeddings/) through the real clients (the
`openai` SDK, LangChain's OpenAIEmbeddings, the `cohere` SDK) and raw HTTP, against the
independent NumPy forwards (tests/engine/bert_reference.py, tests/numpy_reference.py) of
tiny random encoders served beside the tiny chat model: an embedder, an embedder trained for
Matryoshka widths, a cross-encoder reranker, and decoders shaped as Qwen3-Embedding and
Qwen3-Reranker."""

from __future__ import annotations

import base64
import json

import cohere
import numpy as np
import openai
import pytest
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from langchain_openai import OpenAIEmbeddings
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.server.settings import Settings
from engine.loader.sentence_transformers import load_encoder
from tests.engine.bert_reference import (bert_states, cross_encoder_score, pooled, write_cross_encoder,
                                         write_sentence_transformer)
from tests.engine.decoder_encoder_files import (reference_embedding, reference_relevance, write_decoder_embedder,
                                                write_decoder_reranker)

EMBEDDER, MATRYOSHKA, RERANKER = "tiny-embedder", "tiny-matryoshka", "tiny-reranker"
DECODER_EMBEDDER, DECODER_RERANKER = "tiny-qwen3-embedding", "tiny-qwen3-reranker"
TEXTS = ["the cat sat on the mat.", "a big red dog ran fast", "", "birds sang, the dog ran."]
QUERY = "the dog ran"
DOCUMENTS = ["a big dog ran fast.", "the red bird sang", "the cat sat on the mat", "dogs ran, birds sang.", "slow"]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """Each tiny encoder's folder, config, tensors and checkpoint (its tokenizer for the reference)."""
    root = tmp_path_factory.mktemp("encoders")
    made = {EMBEDDER: write_sentence_transformer(root / EMBEDDER, "mean", True, seed=3),
            MATRYOSHKA: write_sentence_transformer(root / MATRYOSHKA, "cls", True, seed=4),
            RERANKER: write_cross_encoder(root / RERANKER, seed=5)}
    config_path = root / MATRYOSHKA / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "matryoshka_dimensions": [8, 16]}))
    return {name: (root / name, config, tensors, load_encoder(root / name)) for name, (config, tensors) in made.items()}


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    """Each tiny decoder encoder's folder, config, weights and tokenizer."""
    root = tmp_path_factory.mktemp("decoders")
    return {DECODER_EMBEDDER: (root / DECODER_EMBEDDER, *write_decoder_embedder(root / DECODER_EMBEDDER, seed=6)),
            DECODER_RERANKER: (root / DECODER_RERANKER, *write_decoder_reranker(root / DECODER_RERANKER, seed=7))}


@pytest.fixture(scope="module")
def client(encoders, decoders, tiny_app_factory):
    # Two batch sizes rather than three: a third fewer programs compiled at start.
    settings = Settings(engine=ONE_BUCKET_ENGINE, encoder_row_buckets=(1, 8),
                        embedding_models=(str(encoders[EMBEDDER][0]), str(encoders[MATRYOSHKA][0]),
                                          str(decoders[DECODER_EMBEDDER][0])),
                        rerank_models=(str(encoders[RERANKER][0]), str(decoders[DECODER_RERANKER][0])))
    with TestClient(app=tiny_app_factory(settings)) as client:
        wait_until_serving(client)
        yield client


@pytest.fixture(scope="module")
def sdk(client):
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0)


def reference_vectors(encoders, name: str, texts_or_ids: list, mode: str) -> np.ndarray:
    _, config, tensors, checkpoint = encoders[name]
    ids = [item if isinstance(item, list) else checkpoint.tokenizer.encode(item) for item in texts_or_ids]
    return np.stack([pooled(bert_states(tensors, config, row), mode, True) for row in ids])


def reference_scores(encoders, query: str, documents: list[str], max_second: int | None = None) -> np.ndarray:
    _, config, tensors, checkpoint = encoders[RERANKER]
    return np.array([cross_encoder_score(tensors, config, *checkpoint.tokenizer.encode_pair(query, document, max_second),
                                         True) for document in documents])


def error_param(response) -> str:
    assert 400 <= response.status_code < 500, response.text
    return response.json()["error"]["param"]


def test_every_input_form_embeds_as_the_reference(sdk, encoders):
    """A text, texts (the empty one included), token ids and lists of them, through the SDK
    (which asks for base64 and decodes it)."""
    ids = encoders[EMBEDDER][3].tokenizer.encode("small blue bird")
    want = reference_vectors(encoders, EMBEDDER, TEXTS, "mean")
    got = sdk.embeddings.create(model=EMBEDDER, input=TEXTS)
    np.testing.assert_allclose([item.embedding for item in got.data], want, rtol=1e-4, atol=1e-5)
    assert [item.index for item in got.data] == [0, 1, 2, 3] and got.model == EMBEDDER
    assert got.usage.prompt_tokens == sum(len(encoders[EMBEDDER][3].tokenizer.encode(text)) for text in TEXTS)
    one = sdk.embeddings.create(model=EMBEDDER, input=TEXTS[0], encoding_format="float").data
    np.testing.assert_allclose(one[0].embedding, want[0], rtol=1e-4, atol=1e-5)
    by_ids = sdk.embeddings.create(model=EMBEDDER, input=ids).data
    lists = sdk.embeddings.create(model=EMBEDDER, input=[ids, ids[:2]]).data
    want_ids = reference_vectors(encoders, EMBEDDER, [ids, ids[:2]], "mean")
    np.testing.assert_allclose(by_ids[0].embedding, want_ids[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose([item.embedding for item in lists], want_ids, rtol=1e-4, atol=1e-5)


def test_base64_holds_the_float32_vector(client):
    floats = client.post("/v1/embeddings", json={"model": EMBEDDER, "input": TEXTS[:2]}).json()["data"]
    encoded = client.post("/v1/embeddings", json={"model": EMBEDDER, "input": TEXTS[:2],
                                                  "encoding_format": "base64"}).json()["data"]
    for plain, packed in zip(floats, encoded):
        vector = np.frombuffer(base64.b64decode(packed["embedding"]), "<f4")
        np.testing.assert_array_equal(vector, np.asarray(plain["embedding"], np.float32))


def test_dimensions_cut_a_matryoshka_model_and_refuse_another(sdk, client, encoders):
    full = reference_vectors(encoders, MATRYOSHKA, TEXTS[:2], "cls")
    got = sdk.embeddings.create(model=MATRYOSHKA, input=TEXTS[:2], dimensions=16).data
    cut = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose([item.embedding for item in got], cut, rtol=1e-4, atol=1e-5)
    assert error_param(client.post("/v1/embeddings", json={"model": MATRYOSHKA, "input": "a", "dimensions": 12})) \
        == "dimensions"  # not one of its trained widths
    assert error_param(client.post("/v1/embeddings", json={"model": EMBEDDER, "input": "a", "dimensions": 16})) \
        == "dimensions"
    assert len(client.post("/v1/embeddings", json={"model": EMBEDDER, "input": "a", "dimensions": 32})
               .json()["data"][0]["embedding"]) == 32  # its own width is no cut


def test_a_long_input_is_a_400_unless_truncated(client, encoders):
    tokenizer = encoders[EMBEDDER][3].tokenizer
    long_text = " ".join(["dog"] * 60)
    response = client.post("/v1/embeddings", json={"model": EMBEDDER, "input": ["cat", long_text]})
    assert error_param(response) == "input[1]" and "62 tokens" in response.json()["error"]["message"]
    for limit, tokens in ((20, 20), (-1, 48)):
        got = client.post("/v1/embeddings", json={"model": EMBEDDER, "input": [long_text],
                                                  "truncate_prompt_tokens": limit})
        ids = tokenizer.encode_truncated(long_text, tokens)
        assert len(ids) == tokens and got.json()["usage"]["prompt_tokens"] == tokens
        np.testing.assert_allclose(got.json()["data"][0]["embedding"],
                                   reference_vectors(encoders, EMBEDDER, [ids], "mean")[0], rtol=1e-4, atol=1e-5)
    assert error_param(client.post("/v1/embeddings", json={"model": EMBEDDER, "input": "a",
                                                           "truncate_prompt_tokens": 0})) == "truncate_prompt_tokens"
    response = client.post("/v1/score", json={"model": RERANKER, "text_1": QUERY, "text_2": [long_text]})
    assert error_param(response) == "text_2[0]"
    cut = client.post("/v1/score", json={"model": RERANKER, "text_1": QUERY, "text_2": [long_text],
                                         "truncate_prompt_tokens": 30}).json()
    room = 30 - len(encoders[RERANKER][3].tokenizer.encode_pair(QUERY, "")[0])
    np.testing.assert_allclose(cut["data"][0]["score"], reference_scores(encoders, QUERY, [long_text], room)[0],
                               rtol=1e-4, atol=1e-6)


def test_a_model_that_cannot_serve_the_route_is_a_400_naming_model(client):
    chat_model = client.app.state.server.model.id
    for path, body in (("/v1/embeddings", {"model": chat_model, "input": "a"}),
                       ("/v1/embeddings", {"model": RERANKER, "input": "a"}),
                       ("/v1/rerank", {"model": chat_model, "query": "a", "documents": ["b"]}),
                       ("/v1/score", {"model": chat_model, "text_1": "a", "text_2": "b"}),
                       ("/v1/rerank", {"query": "a", "documents": ["b"]})):  # three could: name one
        assert error_param(client.post(path, json=body)) == "model", (path, body)
    missing = client.post("/v1/embeddings", json={"model": "nobody", "input": "a"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def test_rerank_orders_as_the_reference_cross_encoder(client, encoders):
    want = reference_scores(encoders, QUERY, DOCUMENTS)
    documents = [text if index % 2 else {"text": text} for index, text in enumerate(DOCUMENTS)]
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        results = client.post(path, json={"model": RERANKER, "query": QUERY, "documents": documents}).json()["results"]
        assert [result["index"] for result in results] == list(np.argsort(-want)), path
        np.testing.assert_allclose([result["relevance_score"] for result in results], np.sort(want)[::-1],
                                   rtol=1e-4, atol=1e-6)
        assert [result["document"]["text"] for result in results] == [DOCUMENTS[i] for i in np.argsort(-want)]
    co = cohere.ClientV2(api_key="unused", base_url=str(client.base_url), httpx_client=client)  # posts /v2/rerank
    reply = co.rerank(model=RERANKER, query=QUERY, documents=DOCUMENTS, top_n=3)
    assert [result.index for result in reply.results] == list(np.argsort(-want)[:3])


def test_decoders_embed_and_rerank_as_their_references(client, sdk, decoders):
    """A Qwen3-Embedding-shaped embedder through the openai SDK, and a Qwen3-Reranker-shaped
    yes/no reranker through /v1/rerank and the cohere SDK."""
    _, config, params, tokenizer = decoders[DECODER_EMBEDDER]
    want = np.stack([reference_embedding(config, params, tokenizer.encode(text).ids) for text in TEXTS])
    got = sdk.embeddings.create(model=DECODER_EMBEDDER, input=TEXTS)
    np.testing.assert_allclose([item.embedding for item in got.data], want, rtol=1e-4, atol=1e-5)
    _, config, params, tokenizer = decoders[DECODER_RERANKER]
    scores = np.array([reference_relevance(config, params, tokenizer, QUERY, document) for document in DOCUMENTS])
    results = client.post("/v1/rerank", json={"model": DECODER_RERANKER, "query": QUERY,
                                              "documents": DOCUMENTS}).json()["results"]
    assert [result["index"] for result in results] == list(np.argsort(-scores)) and np.ptp(scores) > 1e-3
    np.testing.assert_allclose([result["relevance_score"] for result in results], np.sort(scores)[::-1],
                               rtol=1e-4, atol=1e-6)
    co = cohere.ClientV2(api_key="unused", base_url=str(client.base_url), httpx_client=client)
    reply = co.rerank(model=DECODER_RERANKER, query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [result.index for result in reply.results] == list(np.argsort(-scores)[:2])


def test_top_n_keeps_the_best_and_refuses_zero(client, encoders):
    order = list(np.argsort(-reference_scores(encoders, QUERY, DOCUMENTS)))
    body = {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS}
    two = client.post("/v1/rerank", json={**body, "top_n": 2, "return_documents": False}).json()["results"]
    assert [result["index"] for result in two] == order[:2] and all(result.get("document") is None for result in two)
    assert len(client.post("/v1/rerank", json={**body, "top_n": 99}).json()["results"]) == len(DOCUMENTS)
    for top_n in (0, -1):
        assert error_param(client.post("/v1/rerank", json={**body, "top_n": top_n})) == "top_n"


def test_max_tokens_per_doc_cuts_each_document(client, encoders):
    got = client.post("/v1/rerank", json={"model": RERANKER, "query": QUERY, "documents": DOCUMENTS,
                                          "max_tokens_per_doc": 2}).json()["results"]
    want = reference_scores(encoders, QUERY, DOCUMENTS, max_second=2)
    np.testing.assert_allclose([result["relevance_score"] for result in sorted(got, key=lambda r: r["index"])], want,
                               rtol=1e-4, atol=1e-6)
    assert not np.allclose(want, reference_scores(encoders, QUERY, DOCUMENTS), atol=1e-4)


def test_score_pairs_one_against_many_and_pairwise(client, encoders):
    one_to_many = client.post("/v1/score", json={"model": RERANKER, "text_1": QUERY, "text_2": DOCUMENTS}).json()
    np.testing.assert_allclose([item["score"] for item in one_to_many["data"]],
                               reference_scores(encoders, QUERY, DOCUMENTS), rtol=1e-4, atol=1e-6)
    firsts = ["the dog ran", "birds sang"]
    pairwise = client.post("/v1/score", json={"model": RERANKER, "text_1": firsts, "text_2": DOCUMENTS[:2]}).json()
    want = [reference_scores(encoders, first, [second])[0] for first, second in zip(firsts, DOCUMENTS[:2])]
    np.testing.assert_allclose([item["score"] for item in pairwise["data"]], want, rtol=1e-4, atol=1e-6)
    cosine = client.post("/v1/score", json={"model": EMBEDDER, "text_1": QUERY, "text_2": DOCUMENTS[:3]}).json()
    vectors = reference_vectors(encoders, EMBEDDER, [QUERY, *DOCUMENTS[:3]], "mean")
    np.testing.assert_allclose([item["score"] for item in cosine["data"]], vectors[1:] @ vectors[0], rtol=1e-4,
                               atol=1e-5)
    mismatched = client.post("/v1/score", json={"model": RERANKER, "text_1": firsts, "text_2": DOCUMENTS[:3]})
    assert error_param(mismatched) == "text_2"


@pytest.mark.parametrize("path, body, param", [
    ("/v1/embeddings", {"model": EMBEDDER, "input": []}, "input"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": [[]]}, "input[0]"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": [[1, 999999]]}, "input[0]"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": 5}, "input"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": "a", "encoding_format": "int8"}, "encoding_format"),
    ("/v1/embeddings", {"model": EMBEDDER, "input": ["a"] * 2049}, "input"),
    ("/v1/rerank", {"model": RERANKER, "query": "a", "documents": []}, "documents"),
    ("/v1/rerank", {"model": RERANKER, "query": "a", "documents": [7]}, "documents"),
    ("/v1/score", {"model": RERANKER, "text_1": [], "text_2": "b"}, "text_1"),
])
def test_bad_input_is_a_4xx_naming_the_field_and_the_server_serves_on(client, path, body, param):
    assert error_param(client.post(path, json=body)).startswith(param)
    assert client.post("/v1/embeddings", json={"model": EMBEDDER, "input": "still serving"}).status_code == 200


def test_models_lists_what_each_model_does(client):
    tasks = {model["id"]: model["task"] for model in client.get("/v1/models").json()["data"]}
    assert tasks == {client.app.state.server.model.id: "generate", EMBEDDER: "embed", MATRYOSHKA: "embed",
                     RERANKER: "rerank", DECODER_EMBEDDER: "embed", DECODER_RERANKER: "rerank"}


def test_langchain_embeds_documents_and_queries(client, encoders):
    """LangChain's OpenAIEmbeddings, sending text (its tiktoken ids are another vocabulary's)."""
    embeddings = OpenAIEmbeddings(model=EMBEDDER, base_url=f"{client.base_url}/v1", api_key="unused",
                                  http_client=client, check_embedding_ctx_length=False, max_retries=0)
    want = reference_vectors(encoders, EMBEDDER, TEXTS[:2], "mean")
    np.testing.assert_allclose(embeddings.embed_documents(TEXTS[:2]), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(embeddings.embed_query(TEXTS[1]), want[1], rtol=1e-4, atol=1e-5)


def test_metrics_count_each_encoder_s_requests_tokens_and_latency(client, encoders):
    def sample(name: str, model: str, route: str) -> float:
        for family in text_string_to_metric_families(client.get("/metrics").text):
            for found in family.samples:
                if found.name == name and found.labels.get("model") == model and found.labels.get("route") == route:
                    return found.value
        raise AssertionError(f"no {name} for {model} {route}")

    names = ("flint:encoder_requests_total", "flint:encoder_prompt_tokens_total",
             "flint:encoder_request_latency_seconds_count")
    before = [sample(name, RERANKER, "score") for name in names]
    assert sample("flint:encoder_requests_total", RERANKER, "rerank") >= 0  # every route's series from the start
    tokens = client.post("/v1/score", json={"model": RERANKER, "text_1": QUERY, "text_2": DOCUMENTS[:2]}).json()
    after = [sample(name, RERANKER, "score") for name in names]
    assert [b - a for a, b in zip(before, after)] == [1, tokens["usage"]["prompt_tokens"], 1]
