"""Decode windows (engine/host/decode_window.py): several decode steps per device call give exactly
what one step per call gives, stops inside a window included."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import engine.engine as engine_module
from engine.config import EngineConfig
from engine.host.request import Request, SamplingParams, StopCriteria

# No draft rows (num_speculative_tokens 0), so each bucket has max_num_seqs rows: the seeded
# rows of these tests sit at near-ties that follow the float noise of other logit shapes.
WINDOW = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, page_size=4, num_pages=400,
                      max_decode_steps=8, num_speculative_tokens=0)
ONE_STEP = dataclasses.replace(WINDOW, max_decode_steps=1, overlap_steps=False)
OVERLAPPED_STEPS = dataclasses.replace(WINDOW, max_decode_steps=1)

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


def requests(vocab_size: int, stop: StopCriteria | None = None, kinds: dict = KINDS) -> list[Request]:
    rng = np.random.default_rng(5)
    made = []
    for index, (kind, sampling) in enumerate(kinds.items()):
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


def counting_windows(engine, monkeypatch, chained: list | None = None) -> list[int]:
    """The steps of every device call, in order; `chained` gets those dispatched behind
    another still in flight."""
    calls = []
    dispatch, dispatch_next = engine.runner.dispatch, engine.runner.dispatch_next

    def counting(rows, num_steps=1):
        calls.append(num_steps)
        return dispatch(rows, num_steps)

    def counting_next(flight, tables, num_steps):
        calls.append(num_steps)
        if chained is not None:
            chained.append(num_steps)
        return dispatch_next(flight, tables, num_steps)

    monkeypatch.setattr(engine.runner, "dispatch", counting)
    monkeypatch.setattr(engine.runner, "dispatch_next", counting_next)
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


# Rows that ask for nothing per token: their windows land a row at a time (engine/host/window_output.py).
PLAIN_KINDS = {kind: sampling for kind, sampling in KINDS.items() if kind != "logprobs"}


def test_plain_rows_landed_a_row_at_a_time_give_what_single_steps_give(engines, monkeypatch):
    """A window of rows without logprobs lands each row's tokens at once: the same tokens,
    text and stops as one step a call, with stop strings that overlap (the shorter one,
    starting later, ends first), a stop token and the length limits met inside windows."""
    one_step, window = engines
    vocab = window.model_config.vocab_size
    landed = counting_landings(monkeypatch)
    free_run = run(one_step, requests(vocab, kinds=PLAIN_KINDS))
    for criteria in (None, overlapping_stops(free_run)):
        expected = run(one_step, requests(vocab, criteria, PLAIN_KINDS))
        produced = run(window, requests(vocab, criteria, PLAIN_KINDS))
        assert_same(produced, expected)
    assert produced["greedy"]["finish"][0] == "stop" and produced["seeded"]["finish"][0] == "stop"
    assert len(landed) > 5, "no window landed a row at a time"
    assert window.block_manager.num_free_pages == WINDOW.num_pages - 1


def test_rows_landed_at_once_on_the_served_defaults_are_the_rounds_replayed(tiny_engine_factory, monkeypatch):
    """On `flint serve`'s CPU defaults (int8 weights through the native kernels, the
    float8_values cache), one engine's windows landed a row at a time give exactly what the
    same windows replayed round by round give."""
    window = tiny_engine_factory(dataclasses.replace(WINDOW, quantization="int8"))
    assert window.runner.kv_cache_dtype == "float8_values"
    vocab = window.model_config.vocab_size
    landed = counting_landings(monkeypatch)
    free_run = run(window, requests(vocab, kinds=PLAIN_KINDS))
    for criteria in (None, overlapping_stops(free_run)):
        with monkeypatch.context() as by_rounds:
            by_rounds.setattr(engine_module, "lands_by_row", lambda scheduled: False)
            expected = run(window, requests(vocab, criteria, PLAIN_KINDS))
        assert run(window, requests(vocab, criteria, PLAIN_KINDS)) == expected
    assert expected["greedy"]["finish"][0] == "stop"
    assert len(landed) > 5, "no window landed a row at a time"
    assert window.block_manager.num_free_pages == WINDOW.num_pages - 1


def counting_landings(monkeypatch) -> list:
    """A list that grows by one with every window landed a row at a time."""
    landed = []
    land_window = engine_module.land_window
    monkeypatch.setattr(engine_module, "land_window", lambda *args: landed.append(1) or land_window(*args))
    return landed


def overlapping_stops(free_run: dict) -> StopCriteria:
    """Two stop strings from the greedy row's free text, the shorter starting later and ending
    first, and the seeded row's tenth token as a stop token."""
    text, middle = free_run["greedy"]["text"], len(free_run["greedy"]["text"]) // 2
    return StopCriteria(max_tokens=40, ignore_eos=True, token_ids=(free_run["seeded"]["tokens"][9],),
                        strings=(text[middle:middle + 8], text[middle + 2:middle + 4]))


@pytest.mark.parametrize("config", [WINDOW, OVERLAPPED_STEPS], ids=["windows", "single-steps"])
def test_steps_dispatched_behind_one_in_flight_give_what_single_steps_give(tiny_engine_factory, monkeypatch,
                                                                          config):
    """The next window starts on the device before the host has the last one's tokens: the
    same tokens, text, logprobs and stops (a row stopping while the next window is in
    flight among them), and every page back at the end. No prefix caching: a second run's
    cached prompts would be computed in other buckets, and seeded draws at near-ties follow
    such float noise."""
    one_step = tiny_engine_factory(dataclasses.replace(ONE_STEP, enable_prefix_caching=False))
    overlapped = tiny_engine_factory(dataclasses.replace(config, enable_prefix_caching=False))
    vocab = overlapped.model_config.vocab_size
    chained = []
    counting_windows(overlapped, monkeypatch, chained)
    free_run = run(one_step, requests(vocab))
    text = free_run["greedy"]["text"]
    stop = StopCriteria(max_tokens=40, ignore_eos=True, strings=(text[len(text) // 2: len(text) // 2 + 3],))
    for criteria in (None, stop):
        expected, produced = run(one_step, requests(vocab, criteria)), run(overlapped, requests(vocab, criteria))
        assert_same(produced, expected)
    assert produced["greedy"]["finish"] == ("stop", stop.strings[0])
    assert len(chained) > 3, "no step was dispatched behind another"
    assert overlapped.block_manager.num_free_pages == config.num_pages - 1


def test_windows_chained_behind_one_never_run_past_a_row_s_max_tokens(tiny_engine_factory, monkeypatch):
    """The chain's bound, taken once as its first window is scheduled (decode_window.window_
    headroom), counts down by the windows dispatched since: the shortest row's last token
    is its last step, and no device step is spent past it."""
    engine = tiny_engine_factory(WINDOW)
    chained = []
    calls = counting_windows(engine, monkeypatch, chained)
    rng = np.random.default_rng(3)
    for name, max_tokens in (("short", 21), ("long", 60)):
        prompt = [int(t) for t in rng.integers(0, engine.model_config.vocab_size, 7)]
        engine.add_request(Request(name, prompt, SamplingParams(temperature=0.0),
                                   StopCriteria(max_tokens=max_tokens, ignore_eos=True)))
    counts = {}
    while engine.has_unfinished():
        for output in engine.step():
            counts[output.request_id] = output.num_output_tokens
    assert counts == {"short": 21, "long": 60}
    # The prompts' step gives each row its first token; 20 more for "short": 8, then 8 and 4 chained.
    assert calls[:4] == [1, 8, 8, 4] and chained[:2] == [8, 4]
    assert engine.block_manager.num_free_pages == WINDOW.num_pages - 1


def test_an_abort_while_the_next_window_is_in_flight(tiny_engine_factory):
    engine = tiny_engine_factory(WINDOW)
    vocab = engine.model_config.vocab_size
    batch = requests(vocab)[:3]
    for request in batch:
        engine.add_request(request)
    for _ in range(3):  # the prompts, then a window that lands with the next one in flight
        engine.step()
    assert engine._in_flight is not None
    assert engine.abort("greedy").finish_reason == "abort"
    finished = {}
    while engine.has_unfinished():
        finished.update((output.request_id, output) for output in engine.step() if output.finished)
    assert set(finished) == {"seeded", "penalised"}, "the aborted row's in-flight tokens were dropped"
    assert all(finished[r.request_id].num_output_tokens == r.stop.max_tokens for r in batch[1:])
    assert engine.block_manager.num_free_pages == WINDOW.num_pages - 1
