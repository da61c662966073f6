"""Drafts (engine/host/speculation.py) checked by extra rows (engine/verification.py): whatever the
draft, the output is the one plain decoding gives, and right drafts save device calls."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from engine.config import EngineConfig
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.host.sequence import Sequence
from engine.host.speculation import SpeculationConfig, lookup_continuation, propose
from tests.engine.test_decode_window import KINDS, ONE_STEP, WINDOW, assert_same, counting_windows, requests, run

# One bucket for all: a row computed in another bucket may differ in float noise, and a
# seeded draw at a near-tie follows it (the identity holds exactly only for equal shapes).
PLAIN = dataclasses.replace(ONE_STEP, enable_prefix_caching=False, token_buckets=(64,), max_num_seqs=48)
SPECULATIVE = dataclasses.replace(PLAIN, max_decode_steps=WINDOW.max_decode_steps, overlap_steps=True,
                                  num_speculative_tokens=5)
NGRAM = dataclasses.replace(SPECULATIVE, speculative="ngram")


def sequence(prompt: list[int], outputs: list[int] = (), prediction: tuple[int, ...] = ()) -> Sequence:
    seq = Sequence.from_request(Request("r", prompt, prediction=prediction), seed=0)
    for token in outputs:
        seq.append_token(token)
    return seq


def test_lookup_proposes_what_followed_the_latest_match_of_the_longest_ngram():
    tokens = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert lookup_continuation(tokens, 3, range(4, 1, -1)) == [7, 8, 5]  # [2, 3] last seen before 7
    assert lookup_continuation(tokens + [7], 2, range(4, 1, -1)) == [8, 5]  # [2, 3, 7] beats [3, 7]
    assert lookup_continuation([1, 2, 3, 4], 3, range(4, 1, -1)) == []


def test_lookup_matches_whole_tokens_only():
    """Token ids are searched as bytes: a match must start on a token boundary."""
    tokens = [0x01000000, 0x00000002, 5, 1, 2]  # bytes of [1, 2] appear across the first two tokens
    assert lookup_continuation(tokens, 2, range(2, 1, -1)) == []


def test_a_prediction_is_followed_and_found_again_after_an_edit():
    prediction = (10, 11, 12, 13, 14, 15, 16, 17)
    config = SpeculationConfig(num_tokens=3)
    assert propose(sequence([1], prediction=prediction), config, 3) == [10, 11, 12]
    assert propose(sequence([1], [10, 11], prediction), config, 3) == [12, 13, 14]
    edited = sequence([1], [10, 11, 99, 98, 13, 14], prediction)  # 12 became 99 98: one token longer
    assert propose(edited, config, 3) == [15, 16, 17]
    edited.append_token(15)
    assert propose(edited, config, 3) == [16, 17], "the new alignment is kept"
    assert propose(sequence([1], [50, 51], prediction), config, 3) == []
    assert propose(sequence([1], [10], prediction), config, 1) == [11]


def test_lookup_stops_for_a_sequence_whose_drafts_keep_failing():
    config = SpeculationConfig(ngram=True, num_tokens=3)
    seq = sequence([1, 2, 3, 1, 2])
    assert propose(seq, config, 3) == [3, 1, 2]
    seq.record_draft(16, 2)
    seq.record_draft(16, 1)  # 3 of 32 kept
    assert propose(seq, config, 3) == []
    seq.record_draft(16, 16)  # 19 of 48
    assert propose(seq, config, 3) == [3, 1, 2]
    predicting = sequence([1, 2, 3, 1, 2], prediction=(7, 8))
    predicting.record_draft(32, 0)
    assert propose(predicting, config, 3) == [7, 8], "a prediction is always checked"


def predicted(batch: list[Request], outputs: dict, edit: bool = False) -> list[Request]:
    """The requests with each one's plain output as its prediction (one token changed midway
    and one dropped further on, when `edit`)."""
    made = []
    for request in batch:
        tokens = list(outputs[request.request_id]["tokens"])
        if edit:
            tokens[len(tokens) // 3] = (tokens[len(tokens) // 3] + 1) % 50
            del tokens[2 * len(tokens) // 3]
        made.append(dataclasses.replace(request, prediction=tuple(tokens)))
    return made


def drafts_of(engine) -> dict:
    return {seq.request_id: (sum(seq.drafts_proposed), sum(seq.drafts_accepted))
            for seq in engine._sequences.values()}


@pytest.fixture(scope="module")
def optimized_engine(tiny_engine_factory):
    """Tiny engines with XLA's optimizations: these tests run many more steps than they
    compile, and took twice as long on unoptimized steps."""
    return functools.partial(tiny_engine_factory, optimized=True)


@pytest.fixture(scope="module")
def plain_outputs(optimized_engine):
    plain = optimized_engine(PLAIN)
    return run(plain, requests(plain.model_config.vocab_size))


def test_a_right_prediction_gives_the_same_output_in_fewer_calls(optimized_engine, plain_outputs, monkeypatch):
    engine = optimized_engine(SPECULATIVE)
    calls = counting_windows(engine, monkeypatch)
    counts = {}
    produced = run_counting(engine, predicted(requests(engine.model_config.vocab_size), plain_outputs), counts)
    assert_same(produced, plain_outputs)
    assert counts["greedy"].num_rejected == 0 and counts["greedy"].num_accepted >= 15
    assert counts["seeded"].num_accepted >= 15, "a seeded draw keeps a right prediction"
    assert "mirostat" not in counts, "Mirostat rows are never drafted"
    assert len(calls) < 25
    assert engine.block_manager.num_free_pages == SPECULATIVE.num_pages - 1


def test_a_wrong_prediction_changes_nothing_but_the_tally(optimized_engine, plain_outputs):
    engine = optimized_engine(SPECULATIVE)
    counts = {}
    produced = run_counting(engine, predicted(requests(engine.model_config.vocab_size), plain_outputs, edit=True),
                            counts)
    assert_same(produced, plain_outputs)
    assert counts["greedy"].num_rejected > 0 and counts["greedy"].num_accepted >= 12
    assert engine.block_manager.num_free_pages == SPECULATIVE.num_pages - 1


def test_a_stop_inside_a_kept_draft_ends_the_output_there(optimized_engine, plain_outputs):
    reference = optimized_engine(PLAIN)
    vocab = reference.model_config.vocab_size
    text = plain_outputs["greedy"]["text"]
    stop = StopCriteria(max_tokens=40, ignore_eos=True, strings=(text[len(text) // 2: len(text) // 2 + 3],))
    expected = run(reference, requests(vocab, stop))
    engine = optimized_engine(SPECULATIVE)
    produced = run(engine, predicted(requests(vocab, stop), plain_outputs))
    assert_same(produced, expected)
    assert produced["greedy"]["finish"] == ("stop", stop.strings[0])
    assert engine.block_manager.num_free_pages == SPECULATIVE.num_pages - 1


def looping_requests(vocab: int) -> list[Request]:
    """`requests`, plus one whose prompt and first (forced) outputs repeat a pattern, so that
    lookup finds drafts, and forcing decides what they meet."""
    pattern = [5, 6, 7, 8]
    forced = SamplingParams(temperature=0.7, seed=3, forced_output_tokens=tuple(pattern[2:] + pattern * 3))
    return requests(vocab) + [Request("looping", pattern * 3, forced, StopCriteria(max_tokens=24, ignore_eos=True))]


def test_ngram_lookup_changes_nothing_but_the_speed(optimized_engine):
    plain, engine = optimized_engine(PLAIN), optimized_engine(NGRAM)
    vocab = engine.model_config.vocab_size
    counts = {}
    expected, produced = run(plain, looping_requests(vocab)), run_counting(engine, looping_requests(vocab), counts)
    assert_same(produced, expected)
    assert counts["looping"].num_accepted >= 8, "the repeated pattern was not drafted"
    assert engine.block_manager.num_free_pages == NGRAM.num_pages - 1


def run_counting(engine, batch: list[Request], counts: dict) -> dict:
    """`run`, keeping each request's last draft tally in `counts`."""
    step = engine.step

    def counting_step():
        outputs = step()
        counts.update((o.request_id, o.speculation) for o in outputs if o.speculation is not None)
        return outputs

    engine.step = counting_step
    return run(engine, batch)


def test_configs_refuse_unknown_speculation():
    with pytest.raises(ValueError, match="speculative"):
        EngineConfig(speculative="eagle")
    assert set(KINDS) >= {"greedy", "seeded"}


def test_drafts_under_page_pressure_give_the_same_output(optimized_engine, monkeypatch):
    """Few pages: draft pages compete with decodes, sequences are preempted and recomputed,
    and drafts that find no free pages are dropped; the outputs stay those of plain decoding."""
    plain, engine = optimized_engine(PLAIN), optimized_engine(dataclasses.replace(SPECULATIVE, num_pages=70))
    vocab = engine.model_config.vocab_size
    stop = StopCriteria(max_tokens=60, ignore_eos=True)
    expected = run(plain, requests(vocab, stop))
    preempted = []
    preempt = engine.scheduler.preempt
    monkeypatch.setattr(engine.scheduler, "preempt", lambda seq: preempted.append(seq) or preempt(seq))
    produced = run(engine, predicted(requests(vocab, stop), expected))
    assert_same(produced, expected)
    assert preempted, "no sequence was preempted: the test needs fewer pages"
    assert engine.block_manager.num_free_pages == 70 - 1
