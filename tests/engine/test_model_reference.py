"""engine/models/llama.py against the NumPy reference on tiny random weights: prefill, decode, chunks."""

from __future__ import annotations

import numpy as np
import pytest
from numpy_reference import forward

from engine.config import EngineConfig, ModelConfig, RopeScaling
from engine.device.runner import ModelRunner, RowPlan
from engine.models.params import random_params

TINY = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0)
VARIANTS = {
    "llama": TINY,
    "qwen2-bias": TINY.replace(attention_bias=True),
    "qwen3-qknorm": TINY.replace(qk_norm=True, head_dim=16),
    "llama3-rope-scaling": TINY.replace(rope_scaling=RopeScaling(8.0, 1.0, 4.0, 32), rope_theta=500000.0),
    "tied-mha": TINY.replace(tie_word_embeddings=True, num_kv_heads=4),
}
ENGINE = EngineConfig(max_model_len=128, max_num_seqs=4, max_num_batched_tokens=64, page_size=4, num_pages=80)


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def pages_for(num_tokens, first_page=1):
    return list(range(first_page, first_page + -(-num_tokens // ENGINE.page_size)))


@pytest.fixture(params=list(VARIANTS), scope="module")
def model(request):
    config = VARIANTS[request.param]
    params = random_params(config, seed=len(request.param))
    return config, params


def test_prefill_matches_reference(model):
    config, params = model
    prompt = list(np.random.default_rng(1).integers(0, config.vocab_size, 23))
    runner = ModelRunner(config, ENGINE, params)
    logits = runner.hidden_logits([RowPlan(prompt, 0, pages_for(23))])
    assert relative_error(logits, forward(config, params, prompt)) < 1e-4


def test_chunked_prefill_and_decode_match_reference(model):
    """Chunks of 7 tokens, then single-token decodes, all over the paged cache."""
    config, params = model
    tokens = list(np.random.default_rng(2).integers(0, config.vocab_size, 30))
    expected = forward(config, params, tokens)
    runner = ModelRunner(config, ENGINE, params)
    table = pages_for(30, first_page=5)  # not starting at page 1, so page lookups matter
    start = 0
    for size in (7, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1):
        chunk = tokens[start:start + size]
        logits = runner.hidden_logits([RowPlan(chunk, start, table)])
        assert relative_error(logits, expected[start:start + size]) < 1e-4, f"tokens {start}..{start + size}"
        start += size
    assert start == 30


def test_ragged_batch_matches_reference(model):
    """Three sequences in one step: a fresh prompt, a continuing chunk, a decode."""
    config, params = model
    rng = np.random.default_rng(3)
    seqs = [list(rng.integers(0, config.vocab_size, n)) for n in (9, 17, 12)]
    runner = ModelRunner(config, ENGINE, params)
    tables = [pages_for(9, 1), pages_for(17, 10), pages_for(12, 20)]
    # Put earlier parts of sequences 1 and 2 in the cache first.
    runner.hidden_logits([RowPlan(seqs[1][:10], 0, tables[1]), RowPlan(seqs[2][:11], 0, tables[2])])
    rows = [RowPlan(seqs[0], 0, tables[0]), RowPlan(seqs[1][10:], 10, tables[1]),
            RowPlan(seqs[2][11:], 11, tables[2])]
    logits = runner.hidden_logits(rows)
    expected = np.concatenate([forward(config, params, seqs[0]), forward(config, params, seqs[1])[10:],
                               forward(config, params, seqs[2])[11:]])
    assert relative_error(logits, expected) < 1e-4
