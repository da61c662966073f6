"""Lowered steps kept between starts (engine/device/step_export.py): a second runner reads each
bucket's step instead of tracing the model, and serves exactly the tokens a traced one does;
anything changed, unreadable or unexportable is traced again."""

from __future__ import annotations

import logging

import pytest
from tiny_models import tiny_checkpoint

import engine.device.runner as runner_module
from engine.config import EngineConfig
from engine.device import step_export
from engine.engine import Engine
from engine.host.request import Request, SamplingParams, StopCriteria

CONFIG = EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=16, page_size=8, num_pages=24,
                      token_buckets=(1, 16), optimize_compiled_code=False)
PROMPTS = {"short": [5, 6, 7], "long": list(range(20, 32))}  # a decode-heavy row and a 12-token prefill


@pytest.fixture(scope="module")
def checkpoint(smollm2_tokenizer):
    return tiny_checkpoint(smollm2_tokenizer.vocab_size)


@pytest.fixture
def steps(tmp_path):
    """Where this test's runners keep their lowered steps."""
    step_export.keep_lowered_steps(tmp_path / "steps")
    yield tmp_path / "steps"
    step_export.keep_lowered_steps(None)


def compiled_engine(checkpoint, tokenizer, config: EngineConfig = CONFIG) -> Engine:
    engine = Engine(checkpoint, tokenizer, config)
    engine.runner.warmup()
    return engine


def greedy_tokens(engine: Engine) -> dict[str, list[int]]:
    return engine.generate([Request(name, prompt, SamplingParams(temperature=0.0), StopCriteria(max_tokens=6))
                            for name, prompt in PROMPTS.items()])


def never_traced(*_):
    raise AssertionError("the step was traced")


def test_a_second_runner_reads_each_step_and_serves_the_same_tokens(checkpoint, smollm2_tokenizer, steps,
                                                                      monkeypatch):
    step_export.keep_lowered_steps(None)
    traced = greedy_tokens(compiled_engine(checkpoint, smollm2_tokenizer))  # the plain jit path: the reference

    step_export.keep_lowered_steps(steps)
    first = compiled_engine(checkpoint, smollm2_tokenizer)
    assert first.runner.programs.kept_buckets == set()
    assert len(list(steps.glob("*.step"))) == 2  # one per bucket
    assert greedy_tokens(first) == traced

    monkeypatch.setattr(runner_module.ModelRunner, "_forward_and_sample", never_traced)
    second = compiled_engine(checkpoint, smollm2_tokenizer)
    assert second.runner.programs.kept_buckets == {1, 16}
    assert greedy_tokens(second) == traced


def test_a_changed_engine_or_configuration_is_traced_again(checkpoint, smollm2_tokenizer, steps, monkeypatch):
    compiled_engine(checkpoint, smollm2_tokenizer)
    monkeypatch.setattr(step_export, "source_fingerprint", lambda: "an edited engine")
    assert compiled_engine(checkpoint, smollm2_tokenizer).runner.programs.kept_buckets == set()
    other = EngineConfig(**{**vars(CONFIG), "optimize_compiled_code": True})
    assert compiled_engine(checkpoint, smollm2_tokenizer, other).runner.programs.kept_buckets == set()
    assert len(list(steps.glob("*.step"))) == 6


def test_an_unreadable_step_is_exported_again(checkpoint, smollm2_tokenizer, steps, caplog):
    compiled_engine(checkpoint, smollm2_tokenizer)
    damaged = sorted(steps.glob("*.step"))[0]
    damaged.write_bytes(damaged.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="flint"):
        again = compiled_engine(checkpoint, smollm2_tokenizer)
    assert "cannot be read" in caplog.text
    assert len(again.runner.programs.kept_buckets) == 1  # the other one was read
    assert compiled_engine(checkpoint, smollm2_tokenizer).runner.programs.kept_buckets == {1, 16}  # written again


def test_a_step_that_cannot_be_exported_is_traced(checkpoint, smollm2_tokenizer, steps, monkeypatch):
    step_export.keep_lowered_steps(None)
    traced = greedy_tokens(compiled_engine(checkpoint, smollm2_tokenizer))
    step_export.keep_lowered_steps(steps)

    def refuse(*_, **__):
        raise ValueError("cannot export this")

    monkeypatch.setattr(step_export.export, "export", refuse)
    engine = compiled_engine(checkpoint, smollm2_tokenizer)
    assert engine.runner.programs.kept_buckets == set() and not list(steps.glob("*.step"))
    assert greedy_tokens(engine) == traced


def test_without_a_directory_nothing_is_kept(checkpoint, smollm2_tokenizer, tmp_path):
    step_export.keep_lowered_steps(None)
    compiled_engine(checkpoint, smollm2_tokenizer)
    assert not list(tmp_path.rglob("*.step"))
