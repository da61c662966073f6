"""Decoders of a served family as encoders (engine/models/decoder_encoder.py,
engine/loader/decoder_encoder.py): a Qwen3-Embedding-shaped embedder and a
Qwen3-Reranker-shaped yes/no reranker on tiny random weights, against the independent NumPy
forward (tests/numpy_reference.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpy_reference import final_hidden

from engine.device.encoder_runner import EncoderInput, EncoderRunner
from engine.loader.decoder_encoder import answer_ids
from engine.loader.sentence_transformers import load_encoder
from engine.models.pooling import Pooling
from tests.engine.decoder_encoder_files import (reference_embedding, reference_relevance, write_decoder_embedder,
                                                write_decoder_reranker)

TEXTS = ["the cat sat on the mat.", "a dog", "", "birds sang, the dog ran on and on by the river bank."]
QUERY = "where did the dog run?"
DOCUMENTS = ["the dog ran by the river.", "cats sleep all day", "no dogs here", "yes, a dog ran to the river bank"]


# The batch sizes tests/api/test_embeddings.py's server compiles: the same programs, compiled once
# for both (the suite's compilation cache).
ROW_BUCKETS = (1, 8)


def run(checkpoint, inputs: list[EncoderInput], row_buckets=ROW_BUCKETS) -> np.ndarray:
    runner = EncoderRunner(checkpoint, row_buckets)
    runner.warmup()
    return runner.run(inputs)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3-embedding")
    return (*write_decoder_embedder(folder, seed=2), load_encoder(folder))


def test_an_embedder_pools_its_last_token_normalised_as_the_reference(embedder):
    config, params, tokenizer, checkpoint = embedder
    assert checkpoint.task == "embed" and checkpoint.pooling == Pooling("last", True)
    ids = [checkpoint.tokenizer.encode(text) for text in TEXTS]
    assert all(row[-1] == tokenizer.token_to_id("<|endoftext|>") for row in ids)  # the post-processor's
    got = run(checkpoint, [EncoderInput(row) for row in ids])
    want = np.stack([reference_embedding(config, params, row) for row in ids])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Positive controls: the mean of the states, or the last one unnormalised, is another vector.
    means = np.stack([final_hidden(config, params, row).mean(0) for row in ids])
    assert not np.allclose(got, means / np.linalg.norm(means, axis=1, keepdims=True), atol=1e-2)
    raw = np.stack([final_hidden(config, params, row)[-1] for row in ids])
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-2)


def test_the_bare_model_s_checkpoint_reads_as_its_causal_lm(tmp_path, embedder):
    """Qwen3Model's names (no `model.` prefix, no head) load to the same vectors."""
    write_decoder_embedder(tmp_path, seed=2, bare=True)
    bare = load_encoder(tmp_path)
    ids = [EncoderInput(embedder[3].tokenizer.encode(text)) for text in TEXTS[:2]]
    np.testing.assert_array_equal(run(bare, ids), run(embedder[3], ids))


def test_modules_json_chooses_the_pooling(tmp_path):
    config, params, _ = write_decoder_embedder(tmp_path, seed=3, pooling="pooling_mode_mean_tokens")
    checkpoint = load_encoder(tmp_path)
    ids = [checkpoint.tokenizer.encode(text) for text in TEXTS[:2]]
    means = np.stack([final_hidden(config, params, row).mean(0) for row in ids])
    np.testing.assert_allclose(run(checkpoint, [EncoderInput(row) for row in ids], (8,)),
                               means / np.linalg.norm(means, axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3-reranker")
    return (folder, *write_decoder_reranker(folder, seed=4), load_encoder(folder, task="rerank"))


def test_a_yes_no_reranker_scores_and_orders_as_the_reference(reranker):
    _, config, params, tokenizer, checkpoint = reranker
    assert checkpoint.task == "rerank"
    inputs = [EncoderInput(checkpoint.encode_pair(QUERY, document)[0]) for document in DOCUMENTS]
    runner = EncoderRunner(checkpoint, ROW_BUCKETS)
    # Only buckets that hold the prompt are compiled.
    assert runner.token_buckets[0] >= checkpoint.shortest_input > 128 and 16 not in runner.token_buckets
    runner.warmup()
    got = runner.run(inputs)
    want = np.array([reference_relevance(config, params, tokenizer, QUERY, document) for document in DOCUMENTS])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert list(np.argsort(-got)) == list(np.argsort(-want)) and np.ptp(want) > 1e-3  # an order to keep


def test_a_reranker_cuts_the_document_by_its_own_tokens(reranker):
    checkpoint = reranker[-1]
    whole, _ = checkpoint.encode_pair(QUERY, DOCUMENTS[0])
    cut, _ = checkpoint.encode_pair(QUERY, DOCUMENTS[0], max_second=5)
    empty, _ = checkpoint.encode_pair(QUERY, "")
    opening = next(index for index, (a, b) in enumerate(zip(whole, empty)) if a != b)  # where the document starts
    assert cut == whole[: opening + 5] + empty[opening:] and len(whole) > len(cut)


def test_which_tokens_answer_comes_from_config_or_is_refused_by_name(reranker):
    folder, tokenizer = reranker[0], reranker[3]
    document = json.loads((folder / "config.json").read_text())
    assert answer_ids(document, reranker[-1].tokenizer) == (tokenizer.token_to_id("no"), tokenizer.token_to_id("yes"))
    named = {**document, "classifier_from_token": ["n", "y"]}
    assert answer_ids(named, reranker[-1].tokenizer) == (tokenizer.token_to_id("n"), tokenizer.token_to_id("y"))
    (folder / "config.json").write_text(json.dumps(named))
    try:
        assert load_encoder(folder).task == "rerank"  # a reranker by its config alone
        (folder / "config.json").write_text(json.dumps({**document, "classifier_from_token": ["no", "maybe"]}))
        with pytest.raises(ValueError, match="'maybe'"):
            load_encoder(folder)
    finally:
        (folder / "config.json").write_text(json.dumps(document))
    embedder = load_encoder(folder)  # a causal LM named by neither: an embedder of its last token
    assert embedder.task == "embed" and embedder.pooling == Pooling("last", True)
