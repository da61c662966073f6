"""`SamplingParams.output_logits`: each sampled token comes back with its raw model logit,
the same number an independent NumPy forward gives for that token at that position, through
decode windows, seeded sampling and verified drafts alike."""

from __future__ import annotations

import numpy as np
import pytest
from numpy_reference import forward
from shared_configs import FOUR_SEQUENCES

from engine.host.request import Request, SamplingParams, StopCriteria

CONFIG = FOUR_SEQUENCES
PROMPT = [17, 305, 9021, 44, 1207, 88, 3190, 512, 77]


@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(CONFIG)


@pytest.fixture(scope="module")
def checkpoint(tiny_engine_checkpoint):
    return tiny_engine_checkpoint


def run(engine, request: Request, outputs: list | None = None):
    """(tokens, logits, logprobs) of one request run to its end (its outputs into `outputs`)."""
    engine.add_request(request)
    tokens, logits, logprobs = [], [], []
    while engine.has_unfinished():
        for output in engine.step():
            tokens += output.new_token_ids
            logits += output.logits or []
            logprobs += output.logprobs or []
            if outputs is not None:
                outputs.append(output)
    return tokens, logits, logprobs


def reference_logits(checkpoint, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """The NumPy forward's logit of each generated token at the position that produced it."""
    everything = forward(checkpoint.config, checkpoint.params, prompt + tokens)
    rows = everything[len(prompt) - 1: len(prompt) - 1 + len(tokens)]
    return rows[np.arange(len(tokens)), tokens]


def test_greedy_logits_are_the_models_raw_logits(engine, checkpoint):
    request = Request("greedy", PROMPT, SamplingParams(temperature=0.0, output_logits=True),
                      StopCriteria(max_tokens=12, ignore_eos=True))
    tokens, logits, logprobs = run(engine, request)
    assert len(tokens) == len(logits) == 12 and logprobs == []
    np.testing.assert_allclose(logits, reference_logits(checkpoint, PROMPT, tokens), rtol=1e-4, atol=1e-4)
    # Greedy picks the largest raw logit, so each logit is its row's maximum.
    everything = forward(checkpoint.config, checkpoint.params, PROMPT + tokens)
    np.testing.assert_allclose(logits, everything[len(PROMPT) - 1: -1].max(axis=-1), rtol=1e-4, atol=1e-4)


def test_sampled_logits_are_unprocessed_and_agree_with_the_logprobs(engine, checkpoint):
    """A penalised, truncated, hot request still reports the model's own logit."""
    sampling = SamplingParams(temperature=1.3, top_k=40, repetition_penalty=1.5, seed=7, logprobs=0,
                              output_logits=True)
    tokens, logits, logprobs = run(engine, Request("sampled", PROMPT, sampling, StopCriteria(max_tokens=10,
                                                                                            ignore_eos=True)))
    np.testing.assert_allclose(logits, reference_logits(checkpoint, PROMPT, tokens), rtol=1e-4, atol=1e-4)
    everything = forward(checkpoint.config, checkpoint.params, PROMPT + tokens)[len(PROMPT) - 1: -1]
    log_totals = np.log(np.exp(everything - everything.max(-1, keepdims=True)).sum(-1)) + everything.max(-1)
    np.testing.assert_allclose([entry.logprob for entry in logprobs], np.asarray(logits) - log_totals,
                               rtol=1e-4, atol=1e-4)


def test_a_request_that_does_not_ask_gets_no_logits(engine):
    request = Request("plain", PROMPT, SamplingParams(temperature=0.0), StopCriteria(max_tokens=4, ignore_eos=True))
    engine.add_request(request)
    outputs = [output for _ in range(20) if engine.has_unfinished() for output in engine.step()]
    assert outputs and all(output.logits is None for output in outputs)


def test_verified_drafts_carry_their_logits(engine, checkpoint):
    """A predicted output is checked by extra rows of one step; their tokens keep their logits."""
    expected, _, _ = run(engine, Request("plain", PROMPT, SamplingParams(temperature=0.0),
                                         StopCriteria(max_tokens=10, ignore_eos=True)))
    request = Request("predicted", PROMPT, SamplingParams(temperature=0.0, output_logits=True),
                      StopCriteria(max_tokens=10, ignore_eos=True), prediction=tuple(expected))
    outputs = []
    tokens, logits, _ = run(engine, request, outputs)
    assert tokens == expected and outputs[-1].speculation.num_accepted > 0
    assert len(logits) == len(tokens)
    np.testing.assert_allclose(logits, reference_logits(checkpoint, PROMPT, tokens), rtol=1e-4, atol=1e-4)
