"""Shared engine fixtures: the embedded SmolLM2 (loaded once per session) and tiny random models."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig, ModelConfig
from engine.engine import Engine, tokenizer_for
from engine.loader.checkpoint import Checkpoint, load_checkpoint
from engine.loader.source import ModelSource
from engine.params import random_params


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Checkpoint:
    return load_checkpoint(None)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_checkpoint):
    return tokenizer_for(smollm2_checkpoint)


SMOLLM2_ENGINE = EngineConfig(max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=256, num_pages=600)


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_checkpoint, smollm2_tokenizer) -> Engine:
    engine = Engine(smollm2_checkpoint, smollm2_tokenizer, SMOLLM2_ENGINE)
    engine.runner.warmup()
    return engine


def tiny_checkpoint(vocab_size: int, seed: int = 0) -> Checkpoint:
    """A 2-layer random Llama over a real tokenizer's vocabulary, so text round-trips."""
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=8, max_position_embeddings=512)
    source = ModelSource(id="tiny-random", path=None, format="hf", context_length=512)
    return Checkpoint(config, random_params(config, seed=seed), source)


@pytest.fixture(scope="session")
def tiny_engine_factory(smollm2_tokenizer):
    """Engines over one tiny random model, each with its own EngineConfig."""
    checkpoint = tiny_checkpoint(smollm2_tokenizer.vocab_size)

    def make(config: EngineConfig) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, config)
        engine.runner.warmup()
        return engine

    return make
