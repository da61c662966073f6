"""Decode windows (engine/decode_window.py): several decode steps per device call give exactly
what one step per call gives, stops inside a window included."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.request import Request, SamplingParams, StopCriteria

WINDOW = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, page_size=4, num_pages=400,
                      max_decode_steps=8)
ONE_STEP = dataclasses.replace(WINDOW, max_decode_steps=1)

# Every sampling feature whose state moves from one token to the next on the device:
# the seeded draw's position, the penalties' history, Mirostat's mu, and logprobs.
KINDS = {
    "greedy": SamplingParams(temperature=0.0),
    "seeded": SamplingParams(temperature=0.9, top_p=0.9, seed=11),
    "penalised": SamplingParams(temperature=0.8, seed=12, frequency_penalty=1.5, presence_penalty=1.0,
                                repetition_penalty=1.3),
    "mirostat": SamplingParams(temperature=1.0, seed=13, mirostat_target=3.0),
    "logprobs": SamplingParams(temperature=0.7, seed=14, logprobs=3),
    "min-tokens": SamplingParams(temperature=0.0),
}


@pytest.fixture(scope="module")
def engines(tiny_engine_factory):
    return tiny_engine_factory(ONE_STEP), tiny_engine_factory(WINDOW)


def requests(vocab_size: int, stop: StopCriteria | None = None) -> list[Request]:
    rng = np.random.default_rng(5)
    made = []
    for index, (kind, sampling) in enumerate(KINDS.items()):
        prompt = [int(t) for t in rng.integers(0, vocab_size, 6 + 5 * index)]
        criteria = stop or StopCriteria(max_tokens=21 + index, ignore_eos=True,
                                        min_tokens=12 if kind == "min-tokens" else 0)
        made.append(Request(kind, prompt, sampling, criteria))
    return made


def run(engine, batch: list[Request]) -> dict:
    """Per request: tokens, text, finish and stop reasons, and logprobs, as the outputs gave them."""
    for request in batch:
        engine.add_request(request)
    seen = {request.request_id: {"tokens": [], "text": "", "logprobs": []} for request in batch}
    while engine.has_unfinished():
        for output in engine.step():
            entry = seen[output.request_id]
            entry["tokens"] += output.new_token_ids
            entry["text"] += output.text
            entry["logprobs"] += [(lp.token_id, lp.logprob, *zip(*lp.top)) for lp in output.logprobs or []]
            entry["finish"] = (output.finish_reason, output.stop_reason)
    return seen


def assert_same(produced: dict, expected: dict) -> None:
    """Equal, but for float noise in logprob values: a row that stops inside a window keeps its
    place in the batch until the window ends, so later steps may run in another bucket."""
    assert produced.keys() == expected.keys()
    for request_id, entry in produced.items():
        reference = expected[request_id]
        assert {k: v for k, v in entry.items() if k != "logprobs"} == \
            {k: v for k, v in reference.items() if k != "logprobs"}, request_id
        assert [(e[0], e[2]) for e in entry["logprobs"]] == [(e[0], e[2]) for e in reference["logprobs"]]
        for got, want in zip(entry["logprobs"], reference["logprobs"]):
            np.testing.assert_allclose([got[1], *got[3]], [want[1], *want[3]], rtol=1e-4, atol=1e-4)


def counting_windows(engine, monkeypatch) -> list[int]:
    calls = []
    execute = engine.runner.execute

    def counting(rows, num_steps=1):
        calls.append(num_steps)
        return execute(rows, num_steps)

    monkeypatch.setattr(engine.runner, "execute", counting)
    return calls


def test_windows_give_what_single_steps_give(engines, monkeypatch):
    one_step, window = engines
    vocab = window.model_config.vocab_size
    calls = counting_windows(window, monkeypatch)
    expected, produced = run(one_step, requests(vocab)), run(window, requests(vocab))
    assert max(calls) == WINDOW.max_decode_steps, "no window ran"
    assert len(calls) < sum(len(entry["tokens"]) for entry in produced.values()) / 4
    assert_same(produced, expected)
    for request in requests(vocab):
        assert len(produced[request.request_id]["tokens"]) == request.stop.max_tokens
    assert window.block_manager.num_free_pages == WINDOW.num_pages - 1  # no slot of a window leaked


def test_a_stop_inside_a_window_ends_the_sequence_where_one_step_would(engines):
    """A stop string and a stop token id met in the middle of a window: the same cut, text and reason."""
    one_step, window = engines
    vocab = window.model_config.vocab_size
    free_run = run(one_step, requests(vocab))
    text = free_run["greedy"]["text"]
    stop_string = text[len(text) // 2: len(text) // 2 + 3]
    stop_token = free_run["seeded"]["tokens"][9]
    stop = StopCriteria(max_tokens=40, ignore_eos=True, strings=(stop_string,), token_ids=(stop_token,))
    expected, produced = run(one_step, requests(vocab, stop)), run(window, requests(vocab, stop))
    assert_same(produced, expected)
    assert produced["greedy"]["finish"] == ("stop", stop_string)
    assert produced["seeded"]["finish"][0] == "stop"
    assert len(produced["greedy"]["tokens"]) < 40 and len(produced["seeded"]["tokens"]) <= 10
    assert window.block_manager.num_free_pages == WINDOW.num_pages - 1
