"""A fault tied to one request fails that request alone (engine/host/faults.py): its grammar, its
detokenizer, its replaced embeddings, its beam search or its admission raise, it finishes
with finish_reason "error" and its pages freed, and the requests beside it get exactly the
tokens they get without it. A fault outside any request's own work (the device) still
stops the engine: the step raises."""

from __future__ import annotations

import asyncio
import math

import llguidance.numpy
import pytest

from engine import rows
from engine.async_engine import AsyncEngine, RequestFailedError
from engine.config import EngineConfig
from engine.host.beam_search import Hypothesis
from engine.host.request import BeamSearchParams, Request, SamplingParams, StopCriteria
from engine.text.grammar import Grammar

# The grammar tests' engine (tests/engine/test_grammar.py): its programs are compiled already.
TINY = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, num_pages=128, page_size=16)
FAULTY = "faulty"
REGEX = Grammar("regex", r"[a-z ]{4,40}")


class InjectedFault(RuntimeError):
    pass


@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(TINY)


def request(request_id: str, prompt: list[int], grammar: Grammar | None = None, max_tokens: int = 12) -> Request:
    return Request(request_id, prompt, SamplingParams(temperature=0.0), StopCriteria(max_tokens=max_tokens,
                                                                                     ignore_eos=True),
                   grammar=grammar)


def bystanders(grammar: Grammar | None = None) -> list[Request]:
    return [request(f"ok-{i}", [5 + i, 17, 29, 3 + i], grammar) for i in range(3)]


def outcomes(engine, requests: list[Request]) -> tuple[dict[str, list[int]], dict[str, list]]:
    """Each request's generated tokens, and each one's finish reason and error."""
    for item in requests:
        engine.add_request(item)
    tokens = {item.request_id: [] for item in requests}
    ends = {}
    while engine.has_unfinished():
        for output in engine.step():
            tokens[output.request_id].extend(output.new_token_ids)
            if output.finished:
                ends[output.request_id] = [output.finish_reason, output.error]
    return tokens, ends


def alone(engine, requests: list[Request]) -> tuple[dict[str, list[int]], dict[str, list]]:
    """What `requests` get without the faulty one beside them."""
    return outcomes(engine, requests)


def assert_failed_alone(engine, expected, tokens, ends) -> None:
    reason, error = ends[FAULTY]
    assert reason == "error" and isinstance(error, InjectedFault)
    expected_tokens, expected_ends = expected
    for request_id in expected_tokens:
        assert tokens[request_id] == expected_tokens[request_id], request_id
        assert ends[request_id] == expected_ends[request_id] and ends[request_id][1] is None
    assert engine.stats().num_pages_in_use == engine.stats().num_cached_pages  # nothing held
    assert not engine._sequences and not engine._beam_searches


def test_a_detokenizer_that_raises_fails_its_request_alone(engine, monkeypatch):
    expected = alone(engine, bystanders())
    original = engine.output.new_sequence

    def new_sequence(req, seed, matcher=None):
        seq = original(req, seed, matcher)
        if req.request_id == FAULTY:
            def push(token_ids):
                if seq.num_output_tokens >= 3:
                    raise InjectedFault("a tokenizer edge case")
                return type(seq.detokenizer).push(seq.detokenizer, token_ids)
            seq.detokenizer.push = push
        return seq

    monkeypatch.setattr(engine.output, "new_sequence", new_sequence)
    tokens, ends = outcomes(engine, [request(FAULTY, [9, 8, 7, 6])] + bystanders())
    assert_failed_alone(engine, expected, tokens, ends)
    assert 1 <= len(tokens[FAULTY]) < 12  # it failed mid-generation, after its first tokens


def test_a_grammar_whose_masks_raise_fails_its_request_alone(engine, monkeypatch):
    expected = alone(engine, bystanders(REGEX))
    seqs = engine._sequences
    one, many = llguidance.numpy.fill_next_token_bitmask, llguidance.numpy.fill_next_token_bitmask_par

    def is_faulty(matcher) -> bool:
        seq = seqs.get(FAULTY)
        return seq is not None and matcher is seq.matcher and seq.num_output_tokens >= 2

    def fill_one(matcher, words, *args):
        if is_faulty(matcher):
            raise InjectedFault("llguidance raised on this grammar")
        return one(matcher, words, *args)

    def fill_many(executor, matchers, words):
        if any(is_faulty(matcher) for matcher, _ in matchers):
            raise InjectedFault("llguidance raised on one grammar of the batch")
        return many(executor, matchers, words)

    monkeypatch.setattr(llguidance.numpy, "fill_next_token_bitmask", fill_one)
    monkeypatch.setattr(llguidance.numpy, "fill_next_token_bitmask_par", fill_many)
    tokens, ends = outcomes(engine, [request(FAULTY, [9, 8, 7, 6], REGEX)] + bystanders(REGEX))
    assert_failed_alone(engine, expected, tokens, ends)


def test_replaced_embeddings_that_raise_fail_their_request_alone(engine, monkeypatch):
    expected = alone(engine, bystanders())
    original = rows.replaced_between

    def replaced_between(seq, start, count):
        if seq.request_id == FAULTY:
            raise InjectedFault("a bad embedding replacement")
        return original(seq, start, count)

    monkeypatch.setattr(rows, "replaced_between", replaced_between)
    tokens, ends = outcomes(engine, [request(FAULTY, [9, 8, 7, 6])] + bystanders())
    assert_failed_alone(engine, expected, tokens, ends)
    assert tokens[FAULTY] == []


def test_a_beam_search_that_raises_fails_its_request_alone(engine, monkeypatch):
    expected = alone(engine, bystanders())
    beam = request(FAULTY, [9, 8, 7, 6])
    beam.beam = BeamSearchParams(num_beams=3)
    original = engine._add

    def add(req):
        original(req)
        if req.request_id == FAULTY:
            search = engine._beam_searches[FAULTY]
            select, calls = search.select, []

            def failing_select():
                calls.append(1)
                if len(calls) >= 3:  # after the beams have forked: every one must be let go
                    raise InjectedFault("a beam search's selection raised")
                return select()

            search.select = failing_select

    monkeypatch.setattr(engine, "_add", add)
    tokens, ends = outcomes(engine, [beam] + bystanders())
    assert_failed_alone(engine, expected, tokens, ends)


def test_a_request_whose_admission_raises_leaves_nothing_behind(engine, monkeypatch):
    def matcher(grammar):
        raise InjectedFault("the grammar's matcher could not be made")

    monkeypatch.setattr(engine.grammars, "matcher", matcher)
    with pytest.raises(InjectedFault):
        engine.add_request(request(FAULTY, [9, 8, 7, 6], REGEX))
    assert not engine._sequences and not engine.has_unfinished()


def test_the_async_engine_fails_the_request_and_serves_on(engine, monkeypatch):
    expected = alone(engine, [request("after", [4, 4, 4])])
    original = engine.output.new_sequence

    def new_sequence(req, seed, matcher=None):
        if req.request_id == FAULTY:
            raise InjectedFault("its detokenizer could not be made")
        return original(req, seed, matcher)

    async def failing_then_served(served: AsyncEngine) -> list[int]:
        with pytest.raises(RequestFailedError) as failed:
            async for _ in served.generate(request(FAULTY, [9, 8, 7, 6])):
                pass
        assert isinstance(failed.value.__cause__, InjectedFault)
        return [token async for output in served.generate(request("after", [4, 4, 4]))
                for token in output.new_token_ids]

    monkeypatch.setattr(engine.output, "new_sequence", new_sequence)
    served = AsyncEngine(engine)
    served.start()
    try:
        assert asyncio.run(failing_then_served(served)) == expected[0]["after"]
        assert served.is_alive
    finally:
        served.stop()


def test_a_device_fault_still_stops_the_step(engine, monkeypatch):
    def collect(flight):
        raise InjectedFault("a device error")

    monkeypatch.setattr(engine.runner, "collect", collect)
    engine.add_request(request("any", [9, 8, 7, 6]))
    with pytest.raises(InjectedFault):
        while engine.has_unfinished():
            engine.step()


def test_length_penalties_are_bounded_and_their_math_cannot_overflow():
    with pytest.raises(ValueError, match="length_penalty"):
        BeamSearchParams(num_beams=2, length_penalty=1e300)
    with pytest.raises(ValueError, match="length_penalty"):
        BeamSearchParams(num_beams=2, length_penalty=float("nan"))
    # Even past the bound, the length normalization is a number, not an OverflowError:
    # 100 ** 1e300 overflows a float power; the clamped exponent makes the score ~0.
    assert Hypothesis([1] * 100, [-1.0] * 100, "stop").score(1e300) == pytest.approx(0.0, abs=1e-300)
    assert -math.inf < Hypothesis([1] * 100, [-1.0] * 100, "stop").score(-1e300) < -1e300
    assert Hypothesis([1] * 4, [-1.0] * 4, "stop").score(2.0) == pytest.approx(-4.0 / 16)
