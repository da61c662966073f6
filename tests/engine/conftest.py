"""Engine fixtures: compiled SmolLM2 engines (full precision and int8) and engines over a tiny random model."""

from __future__ import annotations

import dataclasses

import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from tiny_models import tiny_checkpoint


# Three buckets, not the default eight: one token (a single stream's decode), 16 (the batch's
# decode, the short prompts' prefill) and 256 (the long prefills). Each SmolLM2 bucket costs
# seconds of compile on a small CPU, and these tests need no other shape.
SMOLLM2_ENGINE = EngineConfig(max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=256, num_pages=600,
                              token_buckets=(1, 16, 256))


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
    """make(config, all_buckets=False, optimized=False): an engine over one tiny random model.

    By default it compiles only its essential buckets (one token and the largest), as
    `flint serve` does before it is healthy: every step then runs in one of those two
    shapes, padded, with the same tokens (test_engine_tiny shows it). A bucket costs
    seconds of compile even for the tiny model, most of the suite's time; tests of the
    buckets themselves ask for all of them. XLA's backend optimizations are off: that
    saves about 45% of a bucket's compile CPU, and these tests, which compile more than
    they run, hardly feel the slower steps. A test that runs many steps asks for
    `optimized` ones (the speculation tests ran twice as long without). The API's apps keep
    the optimizations: their tests send many requests, and there the two costs cancel."""
    checkpoint = tiny_engine_checkpoint

    def make(config: EngineConfig, all_buckets: bool = False, optimized: bool = False) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, dataclasses.replace(config, optimize_compiled_code=optimized))
        engine.runner.warmup(buckets=None if all_buckets else engine.runner.essential_buckets())
        return engine

    return make
