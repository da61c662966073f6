"""The BERT encoder family and sentence-transformers pooling (engine/models/bert.py, pooling.py,
engine/loader/sentence_transformers.py) against an independent NumPy forward
(tests/engine/bert_reference.py): tiny random checkpoints of each pooling, and the embedded
all-MiniLM-L6-v2 read from its package's zip."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.device.compile_cache import CompileCounter
from engine.device.encoder_runner import EncoderInput, EncoderRunner, InputTooLong
from engine.loader.sentence_transformers import embedded_embedder_path, load_encoder
from engine.models.bert import classify, encode, relevance
from engine.models.pooling import pool
from tests.engine.bert_reference import WORDS as WORDS_FOR_TEXTS
from tests.engine.bert_reference import (bert_states, cross_encoder_score, pooled, write_cross_encoder,
                                         write_sentence_transformer)

TEXTS = ["the cat sat on the mat.", "a big red dog ran fast", "birds sang", "the small blue bird sang, the dog ran."]


def embed(checkpoint, texts: list[str], pooling=None) -> np.ndarray:
    """The checkpoint's vectors for `texts`, batched and padded to the longest."""
    ids = [checkpoint.tokenizer.encode(text) for text in texts]
    lengths = np.array([len(row) for row in ids], np.int32)
    batch = np.zeros((len(ids), lengths.max()), np.int32)
    for index, row in enumerate(ids):
        batch[index, : len(row)] = row

    @jax.jit
    def forward(weights, batch, lengths):
        states = encode(weights, checkpoint.config, batch, jnp.zeros_like(batch), lengths)
        return pool(states, lengths, pooling or checkpoint.pooling)

    return np.asarray(forward(checkpoint.weights, batch, lengths))


def reference(tensors: dict, config: dict, checkpoint, texts: list[str], mode: str, normalize: bool) -> np.ndarray:
    return np.stack([pooled(bert_states(tensors, config, checkpoint.tokenizer.encode(text)), mode, normalize)
                     for text in texts])


@pytest.mark.parametrize("mode", ["mean", "cls", "last"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "raw"])
def test_a_tiny_embedder_equals_the_numpy_forward(tmp_path, mode, normalize):
    config, tensors = write_sentence_transformer(tmp_path, mode, normalize)
    checkpoint = load_encoder(tmp_path)
    assert checkpoint.pooling.mode == mode and checkpoint.pooling.normalize is normalize
    assert checkpoint.max_tokens == 48
    got, want = embed(checkpoint, TEXTS), reference(tensors, config, checkpoint, TEXTS, mode, normalize)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    norms = np.linalg.norm(got, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5) if normalize else not np.allclose(norms, 1.0, atol=1e-2)


def test_the_comparison_fails_when_the_pooling_or_normalisation_changes(tmp_path):
    """Positive control: the reference test above fails for a pooling other than the checkpoint's."""
    config, tensors = write_sentence_transformer(tmp_path, "mean", True)
    checkpoint = load_encoder(tmp_path)
    want = reference(tensors, config, checkpoint, TEXTS, "mean", True)
    for changed in (dataclasses.replace(checkpoint.pooling, mode="cls"),
                    dataclasses.replace(checkpoint.pooling, mode="last"),
                    dataclasses.replace(checkpoint.pooling, normalize=False)):
        assert np.abs(embed(checkpoint, TEXTS, changed) - want).max() > 1e-2, changed


def test_padding_changes_no_text_s_vector(tmp_path):
    """Every token attends only to its own text's tokens: a text alone and beside longer ones agree."""
    write_sentence_transformer(tmp_path, "mean", True)
    checkpoint = load_encoder(tmp_path)
    together = embed(checkpoint, TEXTS)
    for index, text in enumerate(TEXTS):
        np.testing.assert_allclose(embed(checkpoint, [text])[0], together[index], rtol=1e-5, atol=1e-6)


def test_a_zipped_checkpoint_reads_as_its_folder(tmp_path):
    write_sentence_transformer(tmp_path / "model", "cls", True)
    with zipfile.ZipFile(tmp_path / "model.zip", "w") as archive:
        for file in (tmp_path / "model").rglob("*"):
            archive.write(file, file.relative_to(tmp_path / "model"))
    np.testing.assert_array_equal(embed(load_encoder(tmp_path / "model.zip"), TEXTS),
                                  embed(load_encoder(tmp_path / "model"), TEXTS))


@pytest.mark.parametrize("change, named", [
    ({"modules": "Dense"}, "sentence_transformers.models.Dense"),
    ({"pooling": "pooling_mode_max_tokens"}, "pooling_mode_max_tokens"),
    ({"pooling": "pooling_mode_cls_token"}, "one of"),  # two modes at once
    ({"config": ("architectures", ["GPT2LMHeadModel"])}, "GPT2LMHeadModel.*BertModel"),
    ({"config": ("hidden_act", "relu")}, "'relu'"),
])
def test_what_is_not_run_is_refused_by_name(tmp_path, change, named):
    extra = ({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},)
    write_sentence_transformer(tmp_path, "mean", True, modules_extra=extra if "modules" in change else ())
    if "pooling" in change:
        path = tmp_path / "1_Pooling" / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), change["pooling"]: True}))
    if "config" in change:
        key, value = change["config"]
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    with pytest.raises(ValueError, match=named):
        load_encoder(tmp_path)


# --- cross-encoder rerankers ---------------------------------------------------------------

QUERY = "the dog ran"
DOCUMENTS = ["a big dog ran fast.", "the red bird sang", "the cat sat on the mat", "dogs ran, birds sang.", "slow"]


def scores(checkpoint, query: str, documents: list[str]) -> np.ndarray:
    """The cross-encoder's score of each (query, document) pair, batched and padded."""
    pairs = [checkpoint.tokenizer.encode_pair(query, document) for document in documents]
    lengths = np.array([len(ids) for ids, _ in pairs], np.int32)
    ids, types = (np.zeros((len(pairs), lengths.max()), np.int32) for _ in range(2))
    for index, (row, row_types) in enumerate(pairs):
        ids[index, : len(row)], types[index, : len(row)] = row, row_types

    @jax.jit
    def forward(weights, ids, types, lengths):
        return relevance(classify(weights, encode(weights, checkpoint.config, ids, types, lengths)),
                         checkpoint.activation)

    return np.asarray(forward(checkpoint.weights, ids, types, lengths))


@pytest.mark.parametrize("activation, sigmoid", [(None, True), ("torch.nn.modules.activation.Sigmoid", True),
                                                 ("torch.nn.modules.linear.Identity", False)])
def test_a_tiny_cross_encoder_scores_and_orders_as_the_numpy_forward(tmp_path, activation, sigmoid):
    config, tensors = write_cross_encoder(tmp_path, activation)
    checkpoint = load_encoder(tmp_path)
    assert checkpoint.task == "rerank" and checkpoint.pooling is None
    assert checkpoint.tokenizer.encode_pair(QUERY, DOCUMENTS[0])[1].count(1) > 0  # the document's tokens are type 1
    want = np.array([cross_encoder_score(tensors, config, *checkpoint.tokenizer.encode_pair(QUERY, document),
                                         sigmoid) for document in DOCUMENTS])
    got = scores(checkpoint, QUERY, DOCUMENTS)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert list(np.argsort(-got)) == list(np.argsort(-want))
    assert len(set(np.round(want, 4))) == len(DOCUMENTS), "the reference must order every document"


def test_the_cross_encoder_comparison_fails_with_the_token_types_dropped(tmp_path):
    """Positive control: the pair's second text is read with its own token type."""
    config, tensors = write_cross_encoder(tmp_path)
    checkpoint = load_encoder(tmp_path)
    got = scores(checkpoint, QUERY, DOCUMENTS)
    untyped = np.array([cross_encoder_score(tensors, config, checkpoint.tokenizer.encode_pair(QUERY, document)[0],
                                            [0] * len(checkpoint.tokenizer.encode_pair(QUERY, document)[0]), True)
                        for document in DOCUMENTS])
    assert np.abs(got - untyped).max() > 1e-3


@pytest.mark.parametrize("activation, labels, named", [
    ("torch.nn.modules.activation.Tanh", 1, "Tanh"), (None, 2, "num_labels 1, not 2")])
def test_a_cross_encoder_not_run_is_refused_by_name(tmp_path, activation, labels, named):
    write_cross_encoder(tmp_path, activation, labels)
    with pytest.raises(ValueError, match=named):
        load_encoder(tmp_path)


# --- the embedded all-MiniLM-L6-v2 ----------------------------------------------------------

# Its vectors against the NumPy forward of its weights: tests/api/test_embeddings_minilm.py, through HTTP.


@pytest.fixture(scope="module")
def minilm():
    return load_encoder(embedded_embedder_path(), "all-MiniLM-L6-v2")


def test_the_embedded_tokenizer_neither_truncates_nor_pads(minilm):
    """tokenizer.json cuts at 128 tokens and pads to 128: both are off, a text's tokens are its own."""
    long_text = " ".join(["word"] * 300)
    assert len(minilm.tokenizer.encode(long_text)) == 302  # [CLS], 300 words, [SEP]
    assert len(minilm.tokenizer.encode("hello")) == 3


# --- the bucketed runner ----------------------------------------------------------------------

def test_the_runner_gives_each_input_its_own_result_in_order_and_compiles_nothing(tmp_path):
    """More texts than the largest row bucket, of mixed lengths, in shuffled order: each gets
    what it gets alone in the reference forward, from the buckets compiled at warmup."""
    config, tensors = write_sentence_transformer(tmp_path, "mean", True)
    runner = EncoderRunner(load_encoder(tmp_path), row_buckets=(1, 4))
    runner.warmup()
    assert len(runner.compiled) == 2 * len(runner.token_buckets) and runner.token_buckets == (16, 32, 48)
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(WORDS_FOR_TEXTS, size=int(rng.integers(1, 30)))) for _ in range(11)]
    inputs = [EncoderInput(runner.checkpoint.tokenizer.encode(text)) for text in texts]
    assert max(len(item.ids) for item in inputs) > 16  # more than one token bucket in use
    with CompileCounter() as counts:
        got = runner.run(inputs)
    assert counts.compiled == 0 and got.shape == (11, 32)
    want = np.stack([pooled(bert_states(tensors, config, item.ids), "mean", True) for item in inputs])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    assert runner.run([]).shape == (0, 32)


def test_the_runner_scores_pairs_and_refuses_a_long_input_by_index(tmp_path):
    config, tensors = write_cross_encoder(tmp_path)
    runner = EncoderRunner(load_encoder(tmp_path), row_buckets=(8,))
    runner.warmup()
    pairs = [runner.checkpoint.tokenizer.encode_pair(QUERY, document) for document in DOCUMENTS]
    got = runner.run([EncoderInput(ids, types) for ids, types in pairs])
    want = [cross_encoder_score(tensors, config, ids, types, True) for ids, types in pairs]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    too_long = EncoderInput([2] + [5] * 68 + [3])  # past the 64 positions (no max_seq_length given)
    with pytest.raises(InputTooLong, match="input 1 has 70 tokens; the model takes at most 64"):
        runner.run([EncoderInput(pairs[0][0], pairs[0][1]), too_long])
