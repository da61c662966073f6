"""The full sampler through the engine on a tiny random model: determinism, biases, bans, logprobs."""

from __future__ import annotations

import random

import numpy as np
import pytest
from shared_configs import ROOMY

from engine.host.request import Request, SamplingParams, StopCriteria, choice_seeds

CONFIG = ROOMY
PROMPT = [11, 257, 1024, 7, 99]
SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, top_k=200, seed=7)
LONG_12 = StopCriteria(max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(CONFIG)


def run(engine, requests):
    return engine.generate(requests)


def long_run(max_tokens: int) -> StopCriteria:
    """Exactly `max_tokens` tokens: EOS does not end it."""
    return StopCriteria(max_tokens=max_tokens, ignore_eos=True)


def mixed_requests(vocab: int, count: int) -> list[Request]:
    rng = np.random.default_rng(5)
    variants = [  # (sampling, max_tokens)
        (SamplingParams(temperature=0.0), 10),
        (SamplingParams(temperature=1.2, min_p=0.05, seed=3), 8),
        (SamplingParams(temperature=0.7, frequency_penalty=0.5, presence_penalty=0.3, repetition_penalty=1.3), 9),
        (SamplingParams(temperature=1.0, typical_p=0.8, xtc_probability=0.5, xtc_threshold=0.05), 7),
        (SamplingParams(temperature=1.0, mirostat_target=4.0, mirostat_lr=0.1), 11),
        (SamplingParams(temperature=0.0, logit_bias=((5, 3.0), (6, -100.0)), logprobs=5), 6),
    ]
    requests = []
    for i in range(count):
        sampling, max_tokens = variants[i % len(variants)]
        prompt = [int(t) for t in rng.integers(0, vocab, int(rng.integers(3, 30)))]
        requests.append(Request(f"mix-{i}", prompt, sampling, long_run(max_tokens)))
    return requests


def test_seeded_request_is_identical_alone_in_a_batch_of_32_and_as_first_of_four_choices(engine):
    alone = run(engine, [Request("alone", PROMPT, SAMPLED, LONG_12)])["alone"]
    others = mixed_requests(engine.model_config.vocab_size, 31)
    batched = run(engine, [Request("in-batch", PROMPT, SAMPLED, LONG_12), *others])["in-batch"]
    seeds = choice_seeds(SAMPLED.seed, 4, draw=lambda: 0)
    choices = run(engine, [Request(f"choice-{i}", PROMPT, SamplingParams(**{**SAMPLED.__dict__, "seed": s}), LONG_12)
                           for i, s in enumerate(seeds)])
    assert alone == batched == choices["choice-0"]
    streams = {tuple(tokens) for tokens in choices.values()}
    assert len(streams) == 4, "the choices of one request must differ"
    again = run(engine, [Request(f"again-{i}", PROMPT, SamplingParams(**{**SAMPLED.__dict__, "seed": s}), LONG_12)
                         for i, s in enumerate(seeds)])
    assert [again[f"again-{i}"] for i in range(4)] == [choices[f"choice-{i}"] for i in range(4)]


def test_choice_seeds_from_a_list_and_at_random():
    assert choice_seeds([4, 5, 6], 3, draw=lambda: 0) == [4, 5, 6]
    with pytest.raises(ValueError, match="expected 2"):
        choice_seeds([1, 2, 3], 2, draw=lambda: 0)
    rng = random.Random(0)
    assert len(set(choice_seeds(None, 5, draw=lambda: rng.randrange(2**31)))) == 5


def test_top_k_one_and_temperature_zero_equal_greedy(engine):
    greedy = run(engine, [Request("greedy", PROMPT, SamplingParams(temperature=0.0), long_run(10))])
    top1 = run(engine, [Request("top1", PROMPT, SamplingParams(temperature=1.5, top_k=1, seed=9), long_run(10))])
    assert greedy["greedy"] == top1["top1"]


def test_logit_bias_forces_and_bans(engine):
    greedy = run(engine, [Request("g", PROMPT, SamplingParams(temperature=0.0), long_run(6))])["g"]
    forced = run(engine, [Request("plus", PROMPT, SamplingParams(temperature=1.0, seed=1, logit_bias=((4242, 100.0),)),
                                  long_run(6))])["plus"]
    assert forced == [4242] * 6
    banned = run(engine, [Request("minus", PROMPT, SamplingParams(temperature=0.0, logit_bias=((greedy[0], -100.0),)),
                                  long_run(6))])["minus"]
    assert banned[0] != greedy[0]


def test_bans_forcing_and_length_floor(engine):
    greedy = run(engine, [Request("g2", PROMPT, SamplingParams(temperature=0.0), long_run(6))])["g2"]
    phrase = (greedy[0], greedy[1])
    no_phrase = run(engine, [Request("bad", PROMPT, SamplingParams(
        temperature=0.0, bad_word_tokens=(phrase,)), long_run(6))])["bad"]
    assert no_phrase[0] == greedy[0] and no_phrase[1] != greedy[1]
    forced = run(engine, [Request("forced", PROMPT, SamplingParams(
        temperature=0.0, forced_output_tokens=(1, 2, 3)), long_run(5))])["forced"]
    assert forced[:3] == [1, 2, 3]
    stop = greedy[2]
    floor = run(engine, [Request("floor", PROMPT, SamplingParams(temperature=0.0),
                                 StopCriteria(max_tokens=6, token_ids=(stop,), min_tokens=5))])["floor"]
    assert stop not in floor[:4] and len(floor) >= 5


def test_logprobs_come_with_each_token(engine):
    request = Request("lp", PROMPT, SamplingParams(temperature=0.8, seed=2, logprobs=3), long_run(4))
    engine.add_request(request)
    entries = []
    while engine.has_unfinished():
        for output in engine.step():
            assert output.logprobs is not None and len(output.logprobs) == len(output.new_token_ids)
            entries += output.logprobs
    assert len(entries) == 4
    for entry in entries:
        assert len(entry.top) == 3 and entry.top[0][1] >= entry.top[1][1] >= entry.top[2][1]
        assert entry.logprob <= 0 and entry.sampling_logprob <= 0 and entry.rank >= 1
        if entry.rank == 1:
            assert entry.top[0][0] == entry.token_id


def test_prompt_logprobs_match_the_reference_across_chunks(engine):
    from numpy_reference import forward

    checkpoint_params = engine_params(engine)
    prompt = [int(t) for t in np.random.default_rng(8).integers(0, engine.model_config.vocab_size, 150)]
    # A request before it would put the prompt in the prefix cache.
    run(engine, [Request("warm-cache", prompt, SamplingParams(temperature=0.0), StopCriteria(max_tokens=1))])
    engine.add_request(Request("plp", prompt, SamplingParams(temperature=0.0, prompt_logprobs=2),
                               StopCriteria(max_tokens=2)))
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    first = outputs[0]
    assert first.num_cached_tokens == 0 and first.prompt_logprobs is not None
    assert all(o.prompt_logprobs is None for o in outputs[1:])
    logits = forward(engine.model_config, checkpoint_params, prompt).astype(np.float64)
    expected = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    entries = first.prompt_logprobs
    assert [e.token_id for e in entries] == prompt[1:]  # 150 tokens over two 128-token steps
    for position, entry in enumerate(entries, start=1):
        assert abs(entry.logprob - expected[position - 1, prompt[position]]) < 1e-3
        assert entry.is_greedy == (int(np.argmax(logits[position - 1])) == prompt[position])
        assert len(entry.top) == 2 and entry.top[0][0] == int(np.argmax(logits[position - 1]))


def engine_params(engine):
    from tiny_models import tiny_checkpoint

    return tiny_checkpoint(engine.model_config.vocab_size).params
