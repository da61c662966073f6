"""`from flint import LLM, SamplingParams` (flint/): offline generation through the engine, on
a tiny random model, against the NumPy forward's greedy tokens and the engine's own seeds."""

from __future__ import annotations

import asyncio
import json
import re

import numpy as np
import pytest
from numpy_reference import forward, greedy

from engine.async_engine import RequestAbortedError
from engine.config import EngineConfig
from flint import LLM, AsyncLLM, BeamSearchParams, SamplingParams, StructuredOutputsParams

CONFIG = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, page_size=4, num_pages=160,
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


def log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def reference_logprobs(checkpoint, ids: list[int]) -> np.ndarray:
    """log p(ids[t] | ids[:t]) for t >= 1, by the NumPy forward."""
    logprobs = log_softmax(forward(checkpoint.config, checkpoint.params, ids).astype(np.float64))
    return np.array([logprobs[t - 1, ids[t]] for t in range(1, len(ids))])


def test_structured_outputs_follow_their_constraint(llm):
    choices = ["yes", "no", "maybe later"]
    constrained = {
        "choice": SamplingParams(temperature=1.0, seed=3, n=4, max_tokens=8,
                                 structured_outputs=StructuredOutputsParams(choice=choices)),
        "regex": SamplingParams(temperature=1.0, seed=4, n=2, max_tokens=12,
                                structured_outputs=StructuredOutputsParams(regex="[0-9]{3}-[a-c]+")),
        "json": SamplingParams(temperature=1.0, seed=5, max_tokens=40, structured_outputs=StructuredOutputsParams(
            json={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                  "additionalProperties": False})),
    }
    results = {kind: llm.generate(PROMPTS[0], params)[0].outputs for kind, params in constrained.items()}
    assert all(choice.text in choices for choice in results["choice"])
    assert all(re.fullmatch("[0-9]{3}-[a-c]+", choice.text) for choice in results["regex"] if choice.finish_reason == "stop")
    assert isinstance(json.loads(results["json"][0].text)["ok"], bool)
    free = llm.generate(PROMPTS[0], SamplingParams(temperature=1.0, seed=3, n=4, max_tokens=8))[0].outputs
    assert not all(choice.text in choices for choice in free)  # the control: unconstrained, it writes other text
    with pytest.raises(ValueError, match="exactly one of"):
        StructuredOutputsParams(regex="a", choice=["a"])


def test_logit_bias_and_bad_words(llm):
    greedy_params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    free = llm.generate(PROMPTS[2], greedy_params)[0].outputs[0]
    biased = llm.generate(PROMPTS[2], greedy_params.replace(logit_bias={1234: 100.0}))[0].outputs[0]
    assert free.token_ids != [1234] * 6 and biased.token_ids == [1234] * 6
    banned_word = llm.tokenizer.decode([free.token_ids[0]])
    banned = llm.generate(PROMPTS[2], greedy_params.replace(bad_words=[banned_word]))[0].outputs[0]
    assert banned.token_ids[0] != free.token_ids[0]
    with pytest.raises(ValueError, match="SamplingParams.logit_bias"):
        llm.generate(PROMPTS[2], greedy_params.replace(logit_bias={10**9: 1.0}))


def test_prompt_logprobs_are_the_reference_s(llm, tiny_engine_checkpoint):
    ids = PROMPTS[2] + [8, 200, 31]
    result = llm.generate([ids], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=2))[0]
    assert result.prompt_logprobs[0] is None and len(result.prompt_logprobs) == len(ids)
    engine = np.array([entry[token].logprob for token, entry in zip(ids[1:], result.prompt_logprobs[1:])])
    np.testing.assert_allclose(engine, reference_logprobs(tiny_engine_checkpoint, ids), atol=2e-4)
    assert all(len(entry) in (2, 3) for entry in result.prompt_logprobs[1:])  # the token and its top 2


def test_beam_search_returns_hypotheses_best_first_scored_as_the_reference(llm, tiny_engine_checkpoint):
    (output,) = llm.beam_search([PROMPTS[2]], BeamSearchParams(beam_width=3, max_tokens=4, ignore_eos=True))
    assert len(output.sequences) == 3 and len({tuple(s.tokens) for s in output.sequences}) == 3
    assert [s.score for s in output.sequences] == sorted((s.score for s in output.sequences), reverse=True)
    for sequence in output.sequences:
        assert sequence.tokens[:len(PROMPTS[2])] == PROMPTS[2] and len(sequence.tokens) == len(PROMPTS[2]) + 4
        expected = reference_logprobs(tiny_engine_checkpoint, sequence.tokens)[len(PROMPTS[2]) - 1:].sum()
        assert sequence.cum_logprob == pytest.approx(expected, abs=1e-3)
    greedy_ids = greedy(tiny_engine_checkpoint.config, tiny_engine_checkpoint.params, PROMPTS[2], 4)
    greedy_sum = reference_logprobs(tiny_engine_checkpoint, PROMPTS[2] + greedy_ids)[len(PROMPTS[2]) - 1:].sum()
    assert output.sequences[0].cum_logprob >= greedy_sum - 1e-4  # the search finds at least greedy's path


def test_chat_renders_the_template_with_the_tools(llm):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    tool = {"type": "function", "function": {"name": "get_weather", "description": "The weather now",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    plain, with_tools = (llm.chat(messages, SamplingParams(temperature=0, max_tokens=2), tools=tools)[0]
                         for tools in (None, [tool]))
    assert plain.prompt_token_ids == llm.tokenizer.encode(llm.tokenizer.render_chat(messages), add_special_tokens=False)
    rendered = llm.tokenizer.decode(with_tools.prompt_token_ids)
    assert '"name": "get_weather"' in rendered and "<tools>" in rendered  # Flint's preamble: SmolLM2's template has no tools
    assert rendered.endswith("What is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    two = llm.chat([messages, messages + [{"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Sure?"}]],
                   SamplingParams(temperature=0, max_tokens=2))
    assert len(two) == 2 and two[0].prompt_token_ids == plain.prompt_token_ids


def test_async_llm_streams_and_aborts_for_new_weights(llm, tiny_engine_checkpoint):
    """Last in this module: the engine moves to the AsyncLLM's thread."""
    expected = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0].outputs[0]
    served = AsyncLLM.from_engine(llm.engine)

    async def stream(params, started: asyncio.Event | None = None):
        seen = []
        async for result in served.generate(PROMPTS[0], params):
            seen.append(len(result.outputs[0].token_ids))
            if started is not None:
                started.set()
        return result, seen

    async def scenario():
        (result, seen), _ = await asyncio.gather(stream(SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)),
                                                 stream(SamplingParams(temperature=1.0, seed=1, max_tokens=3)))
        assert result.outputs[0].token_ids == expected.token_ids and result.outputs[0].text == expected.text
        assert seen == sorted(seen) and seen[-1] == 6
        started = asyncio.Event()
        long = asyncio.create_task(stream(SamplingParams(temperature=0, max_tokens=200, ignore_eos=True), started))
        await started.wait()
        version = await served.update_weights(tiny_engine_checkpoint.params, mode="abort")
        with pytest.raises(RequestAbortedError, match="aborted"):
            await long
        return version

    try:
        assert asyncio.run(scenario()) == served.weights_version
    finally:
        served.shutdown()
