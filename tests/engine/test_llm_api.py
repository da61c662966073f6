"""`from flint import LLM, SamplingParams` (flint/): offline generation through the engine, on
a tiny random model, against the NumPy forward's greedy tokens and the engine's own seeds."""

from __future__ import annotations

import pytest
from numpy_reference import greedy

from engine.config import EngineConfig
from flint import LLM, SamplingParams

CONFIG = EngineConfig(max_model_len=128, max_num_seqs=8, max_num_batched_tokens=64, page_size=4, num_pages=160,
                      token_buckets=(8, 64))
PROMPTS = ["The capital of France is", "def fibonacci(n):", [5, 17, 99, 3]]


@pytest.fixture(scope="module")
def llm(tiny_engine_factory):
    return LLM.from_engine(tiny_engine_factory(CONFIG))


def test_greedy_outputs_are_the_reference_s_in_the_prompts_order(llm, tiny_engine_checkpoint):
    results = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    config, params = tiny_engine_checkpoint.config, tiny_engine_checkpoint.params
    for prompt, result in zip(PROMPTS, results):
        ids = llm.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
        assert result.prompt_token_ids == ids and result.prompt == (prompt if isinstance(prompt, str) else None)
        (output,) = result.outputs
        assert output.token_ids == greedy(config, params, ids, 6) and output.finish_reason == "length"
        assert output.text == llm.tokenizer.decode(output.token_ids)


def test_seeded_choices_reproduce_and_differ(llm):
    params = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=8, ignore_eos=True, logprobs=2)
    first, again = llm.generate(PROMPTS[0], params)[0], llm.generate(PROMPTS[0], params)[0]
    assert [choice.token_ids for choice in first.outputs] == [choice.token_ids for choice in again.outputs]
    assert len({tuple(choice.token_ids) for choice in first.outputs}) > 1
    alone = llm.generate(PROMPTS[0], params.replace(n=1))[0].outputs[0]
    assert alone.token_ids == first.outputs[0].token_ids  # choice 0 keeps the request's seed
    for choice in first.outputs:
        assert len(choice.logprobs) == 8 and all(token in step for token, step in zip(choice.token_ids, choice.logprobs))
        chosen = [step[token] for token, step in zip(choice.token_ids, choice.logprobs)]
        assert choice.cumulative_logprob == pytest.approx(sum(entry.logprob for entry in chosen))
        assert all(entry.sampling_logprob is not None and entry.rank >= 1 for entry in chosen)


def test_one_sampling_params_a_prompt_or_a_clear_error(llm):
    short, longer = SamplingParams(temperature=0, max_tokens=2), SamplingParams(temperature=0, max_tokens=5)
    results = llm.generate(PROMPTS[:2], [short, longer])
    assert [len(result.outputs[0].token_ids) <= limit for result, limit in zip(results, (2, 5))] == [True, True]
    with pytest.raises(ValueError, match="one SamplingParams a prompt"):
        llm.generate(PROMPTS, [short])
    with pytest.raises(ValueError, match="SamplingParams.temperature"):  # the first prompt was queued
        llm.generate(PROMPTS[:2], [short, SamplingParams(temperature=7.0)])
    assert not llm.engine.has_unfinished()
