"""Checkpoints written by the tests load to the logits of the weights they were written from."""

from __future__ import annotations

import numpy as np
import pytest
from loader_files import write_gguf, write_hf
from numpy_reference import forward, inverse_frequencies
from test_loaders import CONFIGS

from engine.config import EngineConfig
from engine.device.runner import ModelRunner, RowPlan
from engine.loader.checkpoint import load_checkpoint
from engine.loader.orbax import save_orbax
from engine.models.params import random_params

SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                "num_kv_heads", "head_dim", "tie_word_embeddings", "attention_bias", "qk_norm")

ENGINE = EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=32, page_size=4, num_pages=20)
PROMPT = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43]


def engine_logits(checkpoint):
    runner = ModelRunner(checkpoint.config, ENGINE, checkpoint.params)
    return runner.hidden_logits([RowPlan(PROMPT, 0, [1, 2, 3, 4])])


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_hf_gguf_and_orbax_give_the_written_weights_logits(tmp_path, arch):
    config = CONFIGS[arch]
    params = random_params(config, seed=11)
    expected = forward(config, params, PROMPT)
    # llama.cpp stores Llama 3 rope scaling as per-frequency divisors, not as settings.
    divisors = inverse_frequencies(config.replace(rope_scaling=None)) / inverse_frequencies(config)
    rope_freqs = {"rope_freqs.weight": divisors.astype(np.float32)} if config.rope_scaling else {}
    loaded = {
        "hf": load_checkpoint(write_hf(tmp_path / "hf", config, params, arch)),
        "gguf": load_checkpoint(write_gguf(tmp_path / "model.gguf", config, params, arch, extra=rope_freqs)),
    }
    save_orbax(tmp_path / "orbax", loaded["gguf"].config, loaded["gguf"].params)
    loaded["orbax"] = load_checkpoint(tmp_path / "orbax")
    for kind, checkpoint in loaded.items():
        for field in SHAPE_FIELDS:
            assert getattr(checkpoint.config, field) == getattr(config, field), (kind, field)
        assert relative_error(engine_logits(checkpoint), expected) < 1e-4, kind
