"""The output stage: stop strings end sequences in the engine, exact hold-back, end tokens.

The first tests drive OutputStage with scripted tokens (a real tokenizer and scheduler, no
model); the rest run real engine steps on a tiny random model, with stop strings taken
from the text the same request generates without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import pytest
from shared_configs import ROOMY

from engine.host.block_manager import BlockManager
from engine.host.output import OutputStage
from engine.host.request import Request, RequestOutput, SamplingParams, StopCriteria
from engine.host.scheduler import Scheduler

CONFIG = ROOMY
GREEDY = SamplingParams(temperature=0.0)
PROMPT = [5, 17, 99, 3, 42, 7]


def held_length(text: str, stop: str) -> int:
    """The definition of the hold-back: the longest suffix of `text` that begins `stop`."""
    return max((n for n in range(len(stop)) if text.endswith(stop[:n])), default=0)


# Scripted tokens through the output stage alone.

@dataclass
class ScriptedStep:
    """The parts of the runner's StepOutput the output stage reads."""

    tokens: np.ndarray
    mirostat_mu: np.ndarray
    prompt_logprobs: list
    logprobs: None = None


class ScriptedEngine:
    """A scheduler and an output stage; each step 'samples' the next scripted token."""

    def __init__(self, tokenizer):
        self.block_manager = BlockManager(CONFIG.num_pages, CONFIG.page_size, CONFIG.enable_prefix_caching)
        self.scheduler = Scheduler(CONFIG, self.block_manager)
        self.eos = tokenizer.eos_token_ids[0]
        self.stage = OutputStage(tokenizer, self.scheduler, frozenset({self.eos}), CONFIG.max_model_len)

    def run(self, request: Request, script: list[int]) -> list[RequestOutput]:
        seq = self.stage.new_sequence(request, seed=0)
        self.scheduler.add(seq)
        outputs = []
        for token in script:
            scheduled = self.scheduler.schedule()
            rows = len(scheduled.scheduled)
            step = ScriptedStep(np.array([token] * rows), np.zeros(rows), [None] * rows)
            outputs += self.stage.process(scheduled, step)
            if seq.is_finished:
                break
        return outputs


@pytest.fixture(scope="module")
def scripted(smollm2_tokenizer):
    return ScriptedEngine(smollm2_tokenizer)


def test_a_stop_string_across_tokens_is_cut_held_back_exactly_and_frees_the_pages(scripted, smollm2_tokenizer):
    text, stop = "The answer is 42.\nEND of the answer", "\nEND"
    script = smollm2_tokenizer.encode(text)
    free_before = scripted.block_manager.num_free_pages
    request = Request("scripted-stop", [1, 2, 3], GREEDY, StopCriteria(max_tokens=100, strings=(stop,)))
    outputs = scripted.run(request, script)
    emitted = list(accumulate(output.text for output in outputs))
    decoded = [smollm2_tokenizer.decode(script[: i + 1]) for i in range(len(outputs))]
    for so_far, reference in zip(emitted[:-1], decoded):  # each running step emits all it safely can
        assert so_far == reference[: len(reference) - held_length(reference, stop)]
    assert any(so_far != reference for so_far, reference in zip(emitted, decoded)), "nothing was held back"
    last = outputs[-1]
    assert emitted[-1] == "The answer is 42."
    assert (last.finish_reason, last.stop_reason) == ("stop", stop)
    assert [t for o in outputs for t in o.new_token_ids] == script[: len(outputs)]  # the completing token is kept
    assert decoded[-1].find(stop) >= 0 and decoded[-2].find(stop) < 0  # it ended in the completing step
    assert scripted.block_manager.num_free_pages == free_before


@pytest.mark.parametrize("ending", ["eos", "length", "abort"])
def test_held_back_text_is_flushed_when_the_sequence_ends_otherwise(scripted, smollm2_tokenizer, ending):
    script = smollm2_tokenizer.encode("result </e")
    stop = StopCriteria(max_tokens=len(script) if ending == "length" else 100, strings=("</end>",))
    request = Request(f"flush-{ending}", [1, 2, 3], GREEDY, stop)
    outputs = scripted.run(request, script + ([scripted.eos] if ending == "eos" else []))
    if ending == "abort":
        seq = scripted.scheduler.abort(request.request_id)
        outputs.append(scripted.stage.aborted(seq))
    assert "".join(output.text for output in outputs[:-1]) == "result "  # "</e" could begin "</end>"
    assert "".join(output.text for output in outputs) == "result </e"
    expected = {"eos": ("stop", None), "length": ("length", None), "abort": ("abort", None)}[ending]
    assert (outputs[-1].finish_reason, outputs[-1].stop_reason) == expected


def test_a_stop_token_id_is_the_stop_reason_and_its_text_is_not_shown(scripted, smollm2_tokenizer):
    script = smollm2_tokenizer.encode("alpha beta gamma delta")
    stop_token = script[2]
    request = Request("stop-token", [1, 2, 3], GREEDY, StopCriteria(max_tokens=100, token_ids=(stop_token,)))
    outputs = scripted.run(request, script)
    assert (outputs[-1].finish_reason, outputs[-1].stop_reason) == ("stop", stop_token)
    assert [t for o in outputs for t in o.new_token_ids] == script[:3]
    assert "".join(output.text for output in outputs) == smollm2_tokenizer.decode(script[:2])


# Real engine steps on a tiny random model.

@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(CONFIG)


def stream(engine, request: Request) -> list[RequestOutput]:
    engine.add_request(request)
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    return outputs


def stop_spanning_two_tokens(outputs: list[RequestOutput]) -> str:
    """A stop string first occurring where one token's text ends and the next one's begins:
    the last two characters before token k, and the first of token k's text."""
    emitted = list(accumulate(output.text for output in outputs))
    for k in range(2, len(outputs)):
        before, after = emitted[k - 1], emitted[k]
        if len(before) >= 2 and len(after) > len(before):
            stop = after[len(before) - 2: len(before) + 1]
            if emitted[-1].find(stop) == len(before) - 2:
                return stop
    raise AssertionError("the reference text has no usable stop string")


def test_a_stop_string_ends_the_sequence_in_the_engine_in_the_step_that_completed_it(engine, monkeypatch):
    reference = stream(engine, Request("no-stop", PROMPT, GREEDY, StopCriteria(max_tokens=24, ignore_eos=True)))
    reference_text = "".join(output.text for output in reference)
    stop = stop_spanning_two_tokens(reference)
    expected = reference_text[: reference_text.find(stop)]

    aborted = []
    monkeypatch.setattr(engine, "abort", lambda request_id: aborted.append(request_id))
    free_before = engine.block_manager.num_free_pages
    engine.add_request(Request("stopped", PROMPT, GREEDY,
                               StopCriteria(max_tokens=24, ignore_eos=True, strings=(stop,))))
    outputs, emitted = [], ""
    while engine.has_unfinished():
        for output in engine.step():
            outputs.append(output)
            emitted += output.text
            assert expected.startswith(emitted)  # nothing from the stop string on, ever
            if output.finish_reason == "stop":  # in this very step: its pages are back
                assert engine.block_manager.num_free_pages == free_before
    last = outputs[-1]
    assert (last.finish_reason, last.stop_reason, emitted) == ("stop", stop, expected)
    assert aborted == []
    tokens = [t for o in outputs for t in o.new_token_ids]
    assert len(tokens) < 24 and tokens == [t for o in reference for t in o.new_token_ids][: len(tokens)]


def test_streamed_text_is_held_back_exactly_while_it_could_begin_the_stop(engine):
    reference = stream(engine, Request("no-stop-2", PROMPT, GREEDY, StopCriteria(max_tokens=24, ignore_eos=True)))
    stop = stop_spanning_two_tokens(reference)
    outputs = stream(engine, Request("held", PROMPT, GREEDY,
                                     StopCriteria(max_tokens=24, ignore_eos=True, strings=(stop,))))
    emitted = list(accumulate(output.text for output in outputs))
    references = list(accumulate(output.text for output in reference))
    for so_far, full in zip(emitted[:-1], references):
        assert so_far == full[: len(full) - held_length(full, stop)]
    assert any(so_far != full for so_far, full in zip(emitted[:-1], references)), "nothing was held back"
    assert emitted[-1] == references[-1][: references[-1].find(stop)]


def test_the_end_token_set_is_built_once_per_sequence(engine, monkeypatch):
    stop_ids = tuple(range(1000, 1040))
    given = []  # the end-token set each sampled row hands the sampler
    dispatch = engine.runner.dispatch

    def spying_dispatch(rows, num_steps=1):
        given.extend(row.sampling.end_token_ids for row in rows if row.sampling is not None)
        return dispatch(rows, num_steps)

    monkeypatch.setattr(engine.runner, "dispatch", spying_dispatch)
    # min_tokens bans the stop tokens, so the request runs all six steps.
    engine.add_request(Request("many-stops", PROMPT, GREEDY, StopCriteria(max_tokens=6, min_tokens=6,
                                                                          token_ids=stop_ids)))
    seq = engine.scheduler.waiting[-1]
    end_token_ids = seq.end_token_ids
    assert end_token_ids == frozenset(stop_ids) | engine.eos_token_ids and engine.eos_token_ids
    while engine.has_unfinished():
        engine.step()
    assert len(given) == 6 and all(ids is end_token_ids for ids in given)
    assert seq.end_token_ids is end_token_ids

    engine.add_request(Request("ignores-eos", PROMPT, GREEDY, StopCriteria(max_tokens=1, ignore_eos=True,
                                                                           token_ids=stop_ids)))
    ignoring = engine.scheduler.waiting[-1]
    assert ignoring.end_token_ids == frozenset(stop_ids)
    assert not ignoring.end_token_ids & engine.eos_token_ids
    while engine.has_unfinished():
        engine.step()
