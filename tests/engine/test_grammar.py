"""Structured output in the engine: every constrained output follows its grammar.

A tiny random model writes nearly random tokens, which makes it a hard test of the mask:
whatever the model prefers, only what the grammar allows may come out. The schemas are
bounded (enums, numbers with limits, short strings) so that a random walk through them ends
well within the token limit.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from engine.config import EngineConfig
from engine.host.decode_window import mask_is_fixed
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.text.grammar import Grammar, GrammarCompiler, GrammarError

TINY = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, num_pages=128, page_size=16)
BOUNDED_SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["color", "count", "ok", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tiny_engine_factory):
    return tiny_engine_factory(TINY)


def run(engine, grammar: Grammar | None, *, seed: int = 0, max_tokens: int = 120, prompt=(1, 2, 3),
        **sampling) -> tuple[str, str]:
    """The text and finish reason of one request."""
    request = Request(f"r{seed}-{id(grammar)}", list(prompt), SamplingParams(seed=seed, temperature=1.0, **sampling),
                      StopCriteria(max_tokens=max_tokens), grammar=grammar)
    engine.add_request(request)
    text, finish = "", None
    while engine.has_unfinished():
        for output in engine.step():
            text += output.text
            finish = output.finish_reason or finish
    return text, finish


@pytest.mark.parametrize("seed", range(4))
def test_json_schema_output_validates_and_stops_when_complete(engine, seed):
    text, finish = run(engine, Grammar("json_schema", json.dumps(BOUNDED_SCHEMA)), seed=seed)
    jsonschema.validate(json.loads(text), BOUNDED_SCHEMA)
    assert finish == "stop"


def test_regex_output_matches(engine):
    for seed in range(3):
        text, finish = run(engine, Grammar("regex", r"(yes|no)-[0-9]{2}"), seed=seed)
        assert re.fullmatch(r"(yes|no)-[0-9]{2}", text), text
        assert finish == "stop"


def test_lark_and_gbnf_outputs_follow_their_grammars(engine):
    lark = 'start: "(" ITEM ("," ITEM)* ")"\nITEM: /[a-c]/'
    text, _ = run(engine, Grammar("lark", lark))
    assert re.fullmatch(r"\([a-c](,[a-c])*\)", text), text
    gbnf = 'root ::= "x" [0-9] [0-9]'
    text, _ = run(engine, Grammar("gbnf", gbnf))
    assert re.fullmatch(r"x[0-9]{2}", text), text


def test_a_cut_answer_finishes_with_length(engine):
    text, finish = run(engine, Grammar("regex", r"[a-z]{50,}"), max_tokens=3)
    assert finish == "length"
    assert re.fullmatch(r"[a-z]+", text), text


def test_constrained_and_free_rows_share_a_batch(engine):
    requests = [Request(f"mix{i}", [5, 6, 7], SamplingParams(seed=i, temperature=1.0), StopCriteria(max_tokens=40),
                        grammar=Grammar("json_schema", json.dumps(BOUNDED_SCHEMA)) if i % 2 else None)
                for i in range(6)]
    generated = engine.generate(requests)
    for i, request in enumerate(requests):
        if i % 2:
            jsonschema.validate(json.loads(engine.tokenizer.decode(generated[request.request_id])), BOUNDED_SCHEMA)
        else:
            assert len(generated[request.request_id]) == 40  # free text runs to its limit (no EOS in 40 here)


@pytest.mark.parametrize("grammar", [
    Grammar("json_schema", '{"type": "objekt"}'),
    Grammar("json_schema", "{not json"),
    Grammar("regex", "a(b"),
    Grammar("lark", "start: missing_rule"),
    Grammar("gbnf", "root ::= undefined-rule"),
])
def test_invalid_grammars_are_refused_with_llguidance_message(engine, grammar):
    with pytest.raises(GrammarError) as error:
        engine.add_request(Request("bad", [1, 2], grammar=grammar))
    assert str(error.value)
    assert not engine.has_unfinished()


def test_forced_tokens_must_follow_the_grammar(engine):
    yes = engine.tokenizer.encode("yes", add_special_tokens=False)
    grammar = Grammar("regex", "(yes|no)!")
    text, _ = run(engine, grammar, forced_output_tokens=tuple(yes))
    assert text == "yes!"
    no_ids = engine.tokenizer.encode("maybe", add_special_tokens=False)
    with pytest.raises(ValueError, match="forced"):
        engine.add_request(Request("forced", [1, 2], SamplingParams(forced_output_tokens=tuple(no_ids)),
                                   grammar=grammar))


def test_constrained_rows_take_single_steps(engine):
    engine.add_request(Request("window", [1, 2], SamplingParams(), grammar=Grammar("regex", "a+")))
    seq = engine._sequences["window"]
    assert not mask_is_fixed(seq)
    engine.abort("window")


def test_masks_are_prepared_by_the_worker_after_each_step(engine):
    engine.add_request(Request("prefetch", [1, 2, 3], SamplingParams(seed=1),
                               StopCriteria(max_tokens=30), grammar=Grammar("regex", "[a-z]{20}")))
    engine.step()  # the prefill, which samples the first token with a mask made on the spot
    seq = engine._sequences["prefetch"]
    assert engine.masks._rows["prefetch"][1] == seq.num_tokens  # the worker has the next one
    while engine.has_unfinished():
        engine.step()


def test_a_matcher_that_refuses_a_token_aborts_the_request(engine):
    """A broken constraint (here a matcher that refuses everything) must not let the output
    go on unconstrained: the request ends with "abort" and nothing of the refused token."""
    class Refusing:
        def __init__(self, matcher):
            self.matcher = matcher

        def consume_token(self, token):
            return False

        def get_error(self):
            return "refused for the test"

        def __getattr__(self, name):
            return getattr(self.matcher, name)

    engine.add_request(Request("broken", [1, 2, 3], SamplingParams(seed=2), StopCriteria(max_tokens=10),
                               grammar=Grammar("regex", "[a-z]+")))
    seq = engine._sequences["broken"]
    seq.matcher = Refusing(seq.matcher)
    outputs = [output for _ in range(3) for output in engine.step() if output.request_id == "broken"]
    assert outputs[-1].finish_reason == "abort" and outputs[-1].new_token_ids == []
    assert not engine.has_unfinished()


def test_the_grammar_vocabulary_is_built_at_the_first_structured_request(engine, monkeypatch):
    """llguidance's tokenizer (37 MiB for SmolLM2's vocabulary) is held only once a request
    constrains its output: compiling the remaining buckets no longer builds it."""
    fresh = GrammarCompiler(engine.grammars._source, engine.grammars.vocab_size, engine.eos_token_ids)
    monkeypatch.setattr(engine, "grammars", fresh)
    engine.compile_remaining()
    run(engine, None, max_tokens=3)
    assert fresh._tokenizer is None
    text, _ = run(engine, Grammar("regex", "[ab]{3}"), max_tokens=3)
    assert fresh._tokenizer is not None and re.fullmatch("[ab]{3}", text)
