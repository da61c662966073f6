"""Replaced input embeddings (engine/host/embeddings.py): a prompt whose embedding at a position is
the embedding row of another token computes exactly what the prompt with that other token
computes, however the scheduler chunks it, and never shares KV pages with plain prompts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from shared_configs import FOUR_SEQUENCES
from tiny_models import tiny_checkpoint

from engine.config import ModelConfig
from engine.device.runner import ModelRunner, RowPlan
from engine.host.block_manager import BlockManager
from engine.host.request import EmbeddingReplacement, Request, SamplingParams, StopCriteria
from engine.host.scheduler import Scheduler
from engine.host.sequence import Sequence
from engine.models.params import random_params

TINY = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8)
# Two embedding rows per step: a prompt with five replacements must be split into chunks.
CONFIG = FOUR_SEQUENCES
PROMPT = [17, 305, 9021, 44, 1207, 88, 3190, 512, 77, 4000, 12, 901, 33, 5, 2718, 640, 23, 99]
SWAPS = {2: 1500, 3: 2600, 4: 3700, 9: 4800, 15: 5900}  # position -> the token whose embedding goes there


@pytest.fixture(scope="module")
def checkpoint(smollm2_tokenizer):
    return tiny_checkpoint(smollm2_tokenizer.vocab_size)  # the weights the factory's engines serve


@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(CONFIG)


def replacements(embed, swaps: dict[int, int]) -> tuple[EmbeddingReplacement, ...]:
    return tuple(EmbeddingReplacement(position, tuple(float(v) for v in embed[token]))
                 for position, token in swaps.items())


def swapped(prompt: list[int], swaps: dict[int, int]) -> list[int]:
    return [swaps.get(position, token) for position, token in enumerate(prompt)]


def test_a_replaced_embedding_computes_like_the_token_it_came_from():
    params = random_params(TINY, seed=3)
    runner = ModelRunner(TINY, CONFIG, params)
    prompt = list(range(10, 30))
    swaps = {5: 77, 6: 3}
    plan = RowPlan(prompt, 0, list(range(1, 6)), embeddings=replacements(params["embed"], swaps))
    replaced = runner.hidden_logits([plan])
    expected = runner.hidden_logits([RowPlan(swapped(prompt, swaps), 0, list(range(6, 11)))])
    plain = runner.hidden_logits([RowPlan(prompt, 0, list(range(11, 16)))])
    np.testing.assert_array_equal(replaced, expected)
    assert np.abs(replaced - plain)[5:].min() > 0  # from the swap on, every position's logits changed


def run(engine, request: Request, *, preempt_after: int | None = None) -> tuple[list[int], list[float], int]:
    """(tokens, logits, cached prompt tokens) of one request run alone to its end;
    `preempt_after`: preempt it once after that many steps (which must come)."""
    engine.add_request(request)
    seq = engine._sequences[request.request_id]
    tokens, logits, cached, steps = [], [], 0, 0
    while engine.has_unfinished():
        for output in engine.step():
            tokens += output.new_token_ids
            logits += output.logits or []
            cached = output.num_cached_tokens
        steps += 1
        if steps == preempt_after:  # (the engine runs no step ahead: overlap_steps is off)
            engine.scheduler.preempt(seq)
    assert seq.num_preemptions == (preempt_after is not None)
    return tokens, logits, cached


def generation(prompt, name: str, embeddings=()) -> Request:
    return Request(name, prompt, SamplingParams(temperature=0.0, output_logits=True),
                   StopCriteria(max_tokens=6, ignore_eos=True), embeddings=embeddings)


def test_chunked_replacements_give_the_swapped_prompts_output(engine, checkpoint):
    embeddings = replacements(checkpoint.params["embed"], SWAPS)
    tokens, logits, _ = run(engine, generation(PROMPT, "replaced", embeddings))
    expected_tokens, expected_logits, _ = run(engine, generation(swapped(PROMPT, SWAPS), "swapped"))
    plain_tokens, plain_logits, _ = run(engine, generation(PROMPT, "plain"))
    assert tokens == expected_tokens
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-5)
    assert not np.allclose(logits, plain_logits, atol=1e-3)


def test_the_prefix_cache_never_mixes_replaced_and_plain_pages(engine, checkpoint):
    """The plain prompt runs first and its pages are cached; the replaced one must not read
    them, nor may the plain one read the replaced one's. The same replacements share."""
    embeddings = replacements(checkpoint.params["embed"], {1: 4321})
    plain = run(engine, generation(PROMPT, "plain-1"))
    replaced = run(engine, generation(PROMPT, "replaced-1", embeddings))
    assert replaced[2] == 0 and replaced[0] == run(engine, generation(swapped(PROMPT, {1: 4321}), "swapped"))[0]
    # Read from the cache, the plain prompt gives the same tokens; its logprobs agree to
    # float32 rounding (a cached prefix computes the rest in other chunks).
    plain_again = run(engine, generation(PROMPT, "plain-2"))
    assert plain_again[0] == plain[0]
    np.testing.assert_allclose(plain_again[1], plain[1], rtol=1e-5, atol=1e-5)
    again = run(engine, generation(PROMPT, "replaced-2", embeddings))
    assert again[2] > 0 and again[0] == replaced[0]


def test_recomputation_after_preemption_applies_the_replacements_again(tiny_engine_factory, checkpoint):
    # One token per step and no prefix cache: the preemption comes mid-decode, and the
    # recomputation cannot read the replaced pages back from the cache.
    engine = tiny_engine_factory(dataclasses.replace(CONFIG, enable_prefix_caching=False, max_decode_steps=1,
                                                     overlap_steps=False))
    embeddings = replacements(checkpoint.params["embed"], SWAPS)
    expected = run(engine, generation(swapped(PROMPT, SWAPS), "swapped"))
    preempted = run(engine, generation(PROMPT, "replaced", embeddings), preempt_after=5)
    assert preempted[0] == expected[0]
    np.testing.assert_allclose(preempted[1], expected[1], rtol=1e-5, atol=1e-5)


def test_a_step_never_carries_more_replacements_than_its_rows():
    scheduler = Scheduler(CONFIG, BlockManager(CONFIG.num_pages, CONFIG.page_size))
    seq = Sequence.from_request(generation(PROMPT, "replaced", replacements(np.zeros((10**4, 32)), SWAPS)), 0)
    scheduler.add(seq)
    chunks = []
    while seq.num_computed_tokens < len(PROMPT):
        output = scheduler.schedule()
        item, = output.scheduled
        chunks.append((item.start, item.num_new_tokens))
        scheduler.update(output, [1] if item.needs_sample else [])
    assert chunks == [(0, 4), (4, 11), (15, 3)]


def width(values: int, *positions: int) -> tuple[EmbeddingReplacement, ...]:
    return tuple(EmbeddingReplacement(position, (0.5,) * values) for position in positions)


@pytest.mark.parametrize("embeddings, message", [
    (width(32, 40), "outside the prompt"),
    (width(32, -1), "outside the prompt"),
    (width(31, 3), "hidden size is 32"),
    (width(32, 3, 5, 3), "more than once"),
])
def test_bad_replacements_are_refused(engine, embeddings, message):
    with pytest.raises(ValueError, match=message):
        engine.add_request(generation(PROMPT, "bad", embeddings))
