"""Engine fixtures: compiled SmolLM2 engines (full precision and int8) and engines over a tiny random model."""

from __future__ import annotations

import dataclasses

import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from tiny_models import tiny_checkpoint


SMOLLM2_ENGINE = EngineConfig(max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=256, num_pages=600)


# Module scope: only test_engine_smollm2 uses them, and compiled SmolLM2 engines kept to the
# end of the run hold memory mappings the rest of the suite needs (tests/conftest.py).
@pytest.fixture(scope="module")
def smollm2_engine(smollm2_checkpoint, smollm2_tokenizer) -> Engine:
    engine = Engine(smollm2_checkpoint, smollm2_tokenizer, SMOLLM2_ENGINE)
    engine.runner.warmup()
    return engine


@pytest.fixture(scope="module")
def smollm2_int8_engine(smollm2_checkpoint, smollm2_tokenizer) -> Engine:
    engine = Engine(smollm2_checkpoint, smollm2_tokenizer, dataclasses.replace(SMOLLM2_ENGINE, quantization="int8"))
    engine.runner.warmup()
    return engine


@pytest.fixture(scope="session")
def tiny_engine_checkpoint(smollm2_tokenizer):
    """The tiny random model `tiny_engine_factory`'s engines serve (for reference forwards)."""
    return tiny_checkpoint(smollm2_tokenizer.vocab_size)


@pytest.fixture(scope="session")
def tiny_engine_factory(smollm2_tokenizer, tiny_engine_checkpoint):
    """Engines over one tiny random model, each with its own EngineConfig."""
    checkpoint = tiny_engine_checkpoint

    def make(config: EngineConfig) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, config)
        engine.runner.warmup()
        return engine

    return make
