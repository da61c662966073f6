"""Beam search in the engine (engine/host/beam_search.py) against an independent NumPy beam search
over the same tiny model's logits, recomputed from scratch for every beam and step: the
same hypotheses, in the same order, with the same scores. Plus the KV pages beams share,
preemption, Friendli's stop-token rule and the sampling types' reproducibility."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy_reference import forward
from shared_configs import SIXTEEN_SEQUENCES

from engine.host.request import BeamSearchParams, Request, SamplingParams, StopCriteria

CONFIG = SIXTEEN_SEQUENCES
PROMPT = [17, 305, 9021, 44, 1207, 88, 3190, 512, 77, 4001]  # 10 tokens: a partly filled last page
EOS = 2  # SmolLM2's <|im_end|>, the tiny engines' end token


@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(CONFIG)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def reference_beam_search(model, prompt, num_beams, max_tokens, length_penalty=1.0, early_stopping=False,
                          bias=None, stop_ids=()):
    """Beam search as documented, on logits recomputed for each beam: [(tokens, score)], best first."""
    def logprobs(tokens):
        logits = forward(model.config, model.params, prompt + tokens)[-1].astype(np.float64)
        for token, value in (bias or {}).items():
            logits[token] += value
        return log_softmax(logits)

    def normalized(tokens, total):
        return total / (len(tokens) ** length_penalty)

    beams, finished = [([], 0.0)], []
    while True:
        pairs = sorted(((total + lp[token], tokens, int(token)) for tokens, total in beams
                        for lp in [logprobs(tokens)] for token in range(len(lp))), key=lambda p: -p[0])
        new = []
        for rank, (total, tokens, token) in enumerate(pairs[: 2 * num_beams]):
            if token == EOS:
                if rank < num_beams:
                    finished.append((tokens + [token], total))
                continue
            new.append((tokens + [token], total))
            if len(new) == num_beams:
                break
        finished = sorted(finished, key=lambda f: -normalized(*f))[:num_beams]
        if len(finished) >= num_beams and (early_stopping or max(normalized(t, s) for t, s in new)
                                           <= normalized(*finished[-1])):
            break
        if stop_ids and all(any(token in stop_ids for token in tokens) for tokens, _ in new):
            for tokens, _ in new:
                end = next(i for i, token in enumerate(tokens) if token in stop_ids) + 1
                kept = tokens[:end]
                total = sum(logprobs(kept[:i])[kept[i]] for i in range(len(kept)))
                finished.append((kept, total))
            break
        if len(new[0][0]) >= max_tokens:
            finished += new
            break
        beams = new
    finished = sorted(finished, key=lambda f: -normalized(*f))[:num_beams]
    return [(tokens, normalized(tokens, total)) for tokens, total in finished]


def run_beams(engine, params: BeamSearchParams, max_tokens: int, sampling: SamplingParams | None = None,
              stop_ids=(), request_id="beams"):
    sampling = sampling or SamplingParams(temperature=0.0)
    engine.add_request(Request(request_id, PROMPT, sampling, StopCriteria(max_tokens=max_tokens, token_ids=stop_ids),
                               beam=params))
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    output, = outputs  # a beam search answers once, at its end
    assert output.finished and output.new_token_ids == output.beams[0].token_ids
    return output.beams


CASES = [
    dict(num_beams=4, max_tokens=6),
    dict(num_beams=3, max_tokens=7, bias={EOS: 4.5}),  # hypotheses end at EOS, some early
    dict(num_beams=3, max_tokens=7, bias={EOS: 4.5}, length_penalty=0.0, early_stopping=True),
    dict(num_beams=5, max_tokens=5, bias={EOS: 5.0}, length_penalty=2.0),
    dict(num_beams=1, max_tokens=4),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: "-".join(f"{k}={v}" for k, v in case.items()))
def test_deterministic_beams_equal_a_numpy_beam_search(engine, tiny_engine_checkpoint, case):
    case = dict(case)
    bias, max_tokens = case.pop("bias", None), case.pop("max_tokens")
    params = BeamSearchParams(**case)
    sampling = SamplingParams(temperature=0.0, logit_bias=tuple((bias or {}).items()))
    beams = run_beams(engine, params, max_tokens, sampling)
    expected = reference_beam_search(tiny_engine_checkpoint, PROMPT, params.num_beams, max_tokens,
                                     params.length_penalty, params.early_stopping, bias)
    assert [beam.token_ids for beam in beams] == [tokens for tokens, _ in expected]
    np.testing.assert_allclose([beam.score for beam in beams], [score for _, score in expected], rtol=1e-4)
    assert [beam.score for beam in beams] == sorted((beam.score for beam in beams), reverse=True)
    if bias:  # the EOS bias made some hypotheses end at EOS: their text leaves it out
        ended = [beam for beam in beams if beam.finish_reason == "stop"]
        assert ended and all(beam.token_ids[-1] == EOS for beam in ended)
    assert engine.block_manager.usage == 0  # every page back


def test_beams_share_the_prompts_pages_and_copy_the_page_they_write(engine):
    params = BeamSearchParams(num_beams=4)
    engine.add_request(Request("shared", PROMPT, SamplingParams(temperature=0.0), StopCriteria(max_tokens=3),
                               beam=params))
    engine.step()  # the prompt, and the first selection: four beams forked from it
    search = engine._beam_searches["shared"]
    tables = [seq.block_table for seq in search.sequences]
    assert len(tables) == 4
    full_pages = len(PROMPT) // CONFIG.page_size
    for index in range(full_pages):  # the prompt's full pages: one page, four references
        assert len({table[index] for table in tables}) == 1
        assert engine.block_manager.ref_count(tables[0][index]) == 4
    # The partly filled last page is each beam's own: the others got copies.
    assert len({table[full_pages] for table in tables}) == 4
    while engine.has_unfinished():
        engine.step()
    assert engine.block_manager.usage == 0


def test_preemption_under_page_pressure_changes_nothing(tiny_engine_factory, engine, monkeypatch):
    """Six beams of 18 tokens need more pages than the 10 free ones, even sharing, so beams
    are preempted, recomputed when no page is free for a copy, or give their pages up while
    they wait for the others to propose; the search goes on to the same answer."""
    tight = tiny_engine_factory(dataclasses.replace(CONFIG, max_model_len=40, num_pages=11,
                                                    enable_prefix_caching=False))
    recomputed = []
    for name in ("preempt", "requeue", "_release_idle"):
        original = getattr(tight.scheduler, name)
        monkeypatch.setattr(tight.scheduler, name,
                            lambda *seq, original=original: recomputed.append(seq) or original(*seq))
    params = BeamSearchParams(num_beams=6)
    beams = run_beams(tight, params, 8)
    assert recomputed
    assert [beam.token_ids for beam in beams] == [beam.token_ids for beam in run_beams(engine, params, 8)]
    assert tight.block_manager.usage == 0


def test_stop_tokens_end_the_search_only_once_every_beam_holds_one(engine, tiny_engine_checkpoint):
    # The stop tokens: the best next tokens after the prompt, so beams pick them up early.
    lp = log_softmax(forward(tiny_engine_checkpoint.config, tiny_engine_checkpoint.params, PROMPT)[-1])
    stop_ids = tuple(int(token) for token in np.argsort(-lp)[:6])
    beams = run_beams(engine, BeamSearchParams(num_beams=3), 10, stop_ids=stop_ids)
    expected = reference_beam_search(tiny_engine_checkpoint, PROMPT, 3, 10, stop_ids=stop_ids)
    assert [beam.token_ids for beam in beams] == [tokens for tokens, _ in expected]
    assert all(beam.token_ids[-1] in stop_ids for beam in beams)
    assert all(sum(token in stop_ids for token in beam.token_ids) == 1 for beam in beams)


@pytest.mark.parametrize("search_type", ["NAIVE_SAMPLING", "STOCHASTIC"])
def test_sampled_beam_searches_are_seeded_and_scored_like_the_model(engine, tiny_engine_checkpoint, search_type):
    params = BeamSearchParams(num_beams=4, search_type=search_type)

    def sampled(seed):
        return run_beams(engine, params, 6, SamplingParams(temperature=1.0, seed=seed), request_id=f"s{seed}")

    first, again, other = sampled(5), sampled(5), sampled(6)
    assert [beam.token_ids for beam in first] == [beam.token_ids for beam in again]
    assert [beam.token_ids for beam in first] != [beam.token_ids for beam in other]
    assert len({tuple(beam.token_ids) for beam in first}) == 4
    for beam in first:  # each score is its tokens' model logprobs summed, over length
        model = tiny_engine_checkpoint
        total = sum(log_softmax(forward(model.config, model.params, PROMPT + beam.token_ids[:i])[-1])[token]
                    for i, token in enumerate(beam.token_ids))
        assert beam.score == pytest.approx(total / len(beam.token_ids), rel=1e-4)
    assert [beam.score for beam in first] == sorted((beam.score for beam in first), reverse=True)


def test_an_aborted_search_gives_every_beams_pages_back(engine):
    engine.add_request(Request("gone", PROMPT, SamplingParams(temperature=0.0), StopCriteria(max_tokens=20),
                               beam=BeamSearchParams(num_beams=5)))
    engine.step()
    engine.step()
    assert len(engine._beam_searches["gone"].sequences) == 5 and engine.block_manager.usage > 0
    aborted = engine.abort("gone")
    assert aborted.finish_reason == "abort"
    assert not engine.has_unfinished() and engine.block_manager.usage == 0 and not engine._beam_searches
