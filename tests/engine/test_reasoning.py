"""Reasoning in the engine (engine/text/reasoning.py): the thinking section's text apart from the
answer, its budget forced, the start tag banned where the answer must not think.

The model is the tiny Qwen3-style one (tests/qwen3_tiny.py), a random model: forced output
tokens and logit bias drive it into and out of thinking, and every expectation is derived
from the tokens it produced or was made to produce.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from qwen3_tiny import R1_STYLE_TEMPLATE, qwen3_checkpoint, qwen3_tokenizer

from engine.config import EngineConfig
from engine.engine import Engine
from engine.host.request import Request, RequestOutput, SamplingParams, StopCriteria
from engine.text.grammar import Grammar
from engine.text.reasoning import ANSWER, END, START, THOUGHT, Reasoning, ReasoningTrack, opens_section, thinking_tags

CONFIG = EngineConfig(max_model_len=512, max_num_seqs=8, max_num_batched_tokens=64, num_pages=200,
                      token_buckets=(8, 64), optimize_compiled_code=False)
USER = [{"role": "user", "content": "What is 6 x 7?"}]


@pytest.fixture(scope="module")
def tokenizer():
    return qwen3_tokenizer()


@pytest.fixture(scope="module")
def engine(tokenizer) -> Engine:
    engine = Engine(qwen3_checkpoint(tokenizer.vocab_size, context_length=512), tokenizer, CONFIG)
    engine.runner.warmup()
    return engine


@pytest.fixture(scope="module")
def tags(tokenizer):
    return tokenizer.thinking


def prompt(tokenizer, **variables) -> list[int]:
    return tokenizer.encode_chat(tokenizer.render_chat_prompt(USER, **variables))


def run(engine: Engine, request: Request) -> list[RequestOutput]:
    engine.add_request(request)
    outputs = []
    while engine.has_unfinished():
        outputs += [output for output in engine.step() if output.request_id == request.request_id]
    return outputs


def joined(outputs: list[RequestOutput]) -> tuple[list[int], str, str]:
    """(token ids, reasoning text, answer text) of a request's outputs."""
    return ([t for o in outputs for t in o.new_token_ids], "".join(o.reasoning_text for o in outputs),
            "".join(o.text for o in outputs))


def thinking(tags, **fields) -> Reasoning:
    return Reasoning(tags.start_id, tags.end_id, **fields)


# Host-side rules, no model.

def test_the_tags_are_found_in_the_vocabulary_and_the_template(tokenizer, smollm2_tokenizer):
    tags = tokenizer.thinking
    assert (tags.start, tags.end) == ("<think>", "</think>")
    assert tokenizer.decode([tags.start_id]) == "<think>" and tokenizer.decode([tags.end_id]) == "</think>"
    assert smollm2_tokenizer.thinking is None  # neither its vocabulary nor its template has them
    no_template = qwen3_tokenizer(chat_template="{{ messages }}")
    assert no_template.thinking is None  # tags in the vocabulary, but the template never writes them
    assert thinking_tags(qwen3_tokenizer(chat_template=R1_STYLE_TEMPLATE)) == tags


def test_a_prompt_opens_the_section_only_at_its_end(tokenizer, tags):
    r1 = qwen3_tokenizer(chat_template=R1_STYLE_TEMPLATE)
    assert opens_section(prompt(r1), tags, r1.decode)
    assert not opens_section(prompt(tokenizer), tags, tokenizer.decode)
    closed = prompt(tokenizer, enable_thinking=False)  # Qwen3 writes an empty section itself
    assert tokenizer.decode(closed).endswith("<think>\n\n</think>\n\n")
    assert not opens_section(closed, tags, tokenizer.decode)
    # A user who writes the tag opens nothing: the template's turn markers follow it.
    written = tokenizer.encode_chat(tokenizer.render_chat_prompt([{"role": "user", "content": "<think>"}]))
    assert tags.start_id in written and not opens_section(written, tags, tokenizer.decode)


def test_the_track_counts_the_section_and_forces_the_bridge_within_the_budget(tags):
    bridge = (1, 2)
    track = ReasoningTrack(thinking(tags, budget=5, budget_end_ids=bridge, opens=True))
    assert track.forced_token(0) == tags.start_id  # an output that must think opens the section itself
    parts = [track.advance(tags.start_id)]
    forced = []
    for _ in range(6):
        token = track.forced_token(len(parts))
        forced.append(token)
        parts.append(track.advance(token if token is not None else 65))
    assert forced == [None, None, None, *bridge, tags.end_id]  # 3 free thoughts + the bridge: 5
    assert parts == [START, *[THOUGHT] * 5, END]
    assert (track.num_thoughts, track.num_tokens) == (5, 7)
    assert track.advance(tags.start_id) == ANSWER and not track.shows(tags.start_id)  # one section only
    # A bridge longer than the budget is left out: the end tag comes once the budget is spent.
    short = ReasoningTrack(thinking(tags, budget=1, budget_end_ids=bridge, starts_inside=True))
    assert short.forced_token(0) is None
    short.advance(65)
    assert short.forced_token(1) == tags.end_id


# The engine on the tiny model.

def test_thinking_text_is_kept_apart_from_the_answer(engine, tokenizer, tags):
    thoughts, answer = "\n\nLet me see: 6 x 7.\n", "\n\n42"
    forced = [tags.start_id, *tokenizer.encode_plain(thoughts), tags.end_id, *tokenizer.encode_plain(answer)]
    request = Request("apart", prompt(tokenizer), SamplingParams(temperature=0, forced_output_tokens=tuple(forced)),
                      StopCriteria(max_tokens=len(forced)), reasoning=thinking(tags))
    outputs = run(engine, request)
    ids, reasoning, text = joined(outputs)
    assert ids == forced
    # The tags show no text, and the newlines at the section's edges are dropped.
    assert (reasoning, text) == (thoughts.strip("\n"), answer.lstrip("\n"))
    assert outputs[-1].num_reasoning_tokens == len(forced) - len(tokenizer.encode_plain(answer))
    # Without a Reasoning, the same tokens are all answer (Qwen3's tags are not special tokens).
    plain = run(engine, dataclasses.replace(request, request_id="plain", reasoning=None))
    assert joined(plain)[1:] == ("", tokenizer.decode(forced, skip_special_tokens=True))


def test_a_spent_budget_forces_the_bridge_then_the_end_tag(engine, tokenizer, tags):
    bridge = tuple(tokenizer.encode_plain(" Time to answer."))
    budget = 24
    request = Request("budget", prompt(tokenizer), SamplingParams(temperature=1.0, seed=7),
                      StopCriteria(max_tokens=budget + 12, ignore_eos=True),
                      reasoning=thinking(tags, budget=budget, budget_end_ids=bridge, opens=True))
    outputs = run(engine, request)
    ids, reasoning, text = joined(outputs)
    free = budget - len(bridge)
    assert ids[0] == tags.start_id
    assert tags.end_id not in ids[1:1 + free]
    assert tuple(ids[1 + free:1 + budget]) == bridge and ids[1 + budget] == tags.end_id
    assert reasoning == tokenizer.decode(ids[1:1 + budget], skip_special_tokens=True).strip("\n")
    assert reasoning.endswith(" Time to answer.")
    assert text == tokenizer.decode(ids[2 + budget:], skip_special_tokens=True).lstrip("\n")
    assert outputs[-1].num_reasoning_tokens == budget + 2
    assert ids[2 + budget:].count(tags.start_id) == 0


def test_no_thinking_closes_an_open_section_at_once_and_bans_the_start_tag(engine, tokenizer, tags):
    r1_prompt = prompt(qwen3_tokenizer(chat_template=R1_STYLE_TEMPLATE))
    pulled = SamplingParams(temperature=0, logit_bias=((tags.start_id, 100.0),))
    closed = run(engine, Request("closed", r1_prompt, SamplingParams(temperature=0), StopCriteria(max_tokens=6),
                                 reasoning=thinking(tags, starts_inside=True, budget=0)))
    ids, reasoning, text = joined(closed)
    assert ids[0] == tags.end_id and (reasoning, closed[-1].num_reasoning_tokens) == ("", 1)
    banned = run(engine, Request("banned", prompt(tokenizer, enable_thinking=False), pulled,
                                 StopCriteria(max_tokens=6), reasoning=thinking(tags, budget=0)))
    assert tags.start_id not in joined(banned)[0] and banned[-1].num_reasoning_tokens == 0
    # Thinking allowed: the start tag may come first (the bias pulls it), and never after.
    opened = run(engine, Request("opened", prompt(tokenizer), pulled, StopCriteria(max_tokens=6),
                                 reasoning=thinking(tags)))
    ids = joined(opened)[0]
    assert ids[0] == tags.start_id and tags.start_id not in ids[1:]
    unguarded = run(engine, Request("unguarded", prompt(tokenizer), pulled, StopCriteria(max_tokens=6)))
    assert joined(unguarded)[0] == [tags.start_id] * 6  # the control: the bias alone repeats it


def test_stop_strings_and_grammars_apply_to_the_answer_only(engine, tokenizer, tags):
    thoughts = tokenizer.encode_plain("stop? Z!")
    head = [tags.start_id, *thoughts, tags.end_id]
    stopped = run(engine, Request(
        "stop", prompt(tokenizer),
        SamplingParams(temperature=0, forced_output_tokens=tuple(head + tokenizer.encode_plain("ab stop cd"))),
        StopCriteria(max_tokens=40, strings=("stop",)), reasoning=thinking(tags)))
    ids, reasoning, text = joined(stopped)
    assert (reasoning, text, stopped[-1].finish_reason) == ("stop? Z!", "ab ", "stop")
    # The grammar allows no "Z" or "!", which the forced thoughts hold: it waits for the answer.
    grammar = Grammar("regex", "[a-c]{3,6}")
    constrained = run(engine, Request("grammar", prompt(tokenizer),
                                      SamplingParams(temperature=1.0, seed=3, forced_output_tokens=tuple(head)),
                                      StopCriteria(max_tokens=40), grammar=grammar, reasoning=thinking(tags)))
    ids, reasoning, text = joined(constrained)
    assert reasoning == "stop? Z!" and constrained[-1].finish_reason == "stop"
    assert re.fullmatch("[a-c]{3,6}", text), text


def test_windows_and_drafts_never_run_past_a_forced_token(engine, tokenizer, tags):
    """The budget forces the bridge one token at a time: decode windows, chained windows and
    drafts stop short of it, so every way of stepping gives the same output."""
    bridge = tuple(tokenizer.encode_plain(" Enough."))
    # The end tag banned, so that no draw ends the thinking before its budget does (the bridge
    # and the end are forced past the ban).
    never_ends = SamplingParams(temperature=1.0, seed=11, logit_bias=((tags.end_id, -100.0),))
    request = Request("window", prompt(tokenizer), never_ends, StopCriteria(max_tokens=60, ignore_eos=True),
                      reasoning=thinking(tags, budget=30, budget_end_ids=bridge, opens=True))
    windowed = joined(run(engine, request))[0]
    free = 30 - len(bridge)
    assert tuple(windowed[1 + free:31]) == bridge and windowed[31] == tags.end_id
    config = engine.config
    try:
        engine.config = dataclasses.replace(config, max_decode_steps=1, overlap_steps=False)
        single = joined(run(engine, dataclasses.replace(request, request_id="single")))[0]
    finally:
        engine.config = config
    assert single == windowed
    # A predicted output that is the answer itself: drafts verified in the thinking too.
    predicted = run(engine, dataclasses.replace(request, request_id="drafts", prediction=tuple(windowed)))
    assert joined(predicted)[0] == windowed and predicted[-1].speculation.num_accepted > 0
