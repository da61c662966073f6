"""Friendli's beam search on /v1/completions over the tiny-model app: the beams come back as
the prompt's choices, best first, exactly as the engine's own beam search gives them
(tests/engine/test_beam_search.py checks that against NumPy), with the parameters reaching
it; and the seed's rules refuse what cannot go with beams, naming the field."""

from __future__ import annotations

import pytest
from completions_helpers import complete
from tiny_models import tiny_checkpoint

from engine.engine import Engine
from engine.host.request import BeamSearchParams, Request, SamplingParams, StopCriteria

PROMPT = [17, 305, 9021, 44, 1207, 88, 3190, 512, 77, 4001]
EOS = 2


@pytest.fixture(scope="module")
def engine(client, tokenizer):
    """An engine of its own over the app's tiny weights and configuration, run directly."""
    config = client.app.state.server.running_engine.engine.config
    engine = Engine(tiny_checkpoint(tokenizer.vocab_size), tokenizer, config)
    engine.runner.warmup()
    return engine


def engine_beams(engine, prompt, max_tokens, params: BeamSearchParams, sampling: SamplingParams):
    engine.add_request(Request("direct", prompt, sampling, StopCriteria(max_tokens=max_tokens), beam=params))
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    return outputs[0].beams


def beam_body(**fields) -> dict:
    return {"tokens": PROMPT, "max_tokens": 6, "num_beams": 3, **fields}


def test_beams_are_the_choices_best_first(client, engine, tokenizer):
    answer = complete(client, **beam_body(temperature=0))
    expected = engine_beams(engine, PROMPT, 6, BeamSearchParams(num_beams=3), SamplingParams(temperature=0.0))
    assert [choice["index"] for choice in answer["choices"]] == [0, 1, 2]
    assert [choice["tokens"] for choice in answer["choices"]] == [beam.token_ids for beam in expected]
    assert [choice["text"] for choice in answer["choices"]] == [beam.text for beam in expected]
    assert [choice["finish_reason"] for choice in answer["choices"]] == [beam.finish_reason for beam in expected]
    assert answer["choices"][0]["text"] == tokenizer.decode(expected[0].token_ids, skip_special_tokens=True)
    assert answer["usage"]["completion_tokens"] == sum(len(beam.token_ids) for beam in expected)
    assert answer["usage"]["prompt_tokens"] == len(PROMPT)


def test_every_prompt_gets_its_own_beams(client):
    other = PROMPT[::-1]
    both = complete(client, prompt=[PROMPT, other], max_tokens=4, num_beams=2)["choices"]
    assert [choice["index"] for choice in both] == [0, 1, 2, 3]
    alone = [complete(client, prompt=[prompt], max_tokens=4, num_beams=2)["choices"] for prompt in (PROMPT, other)]
    assert [choice["tokens"] for choice in both] == [choice["tokens"] for choices in alone for choice in choices]


def test_length_penalty_and_early_stopping_reach_the_search(client, engine):
    bias = {str(EOS): 4.5}  # hypotheses end at EOS, at different lengths
    results = {}
    for length_penalty, early_stopping in ((0.0, True), (2.0, False)):
        body = beam_body(logit_bias=bias, length_penalty=length_penalty, early_stopping=early_stopping, max_tokens=8)
        params = BeamSearchParams(num_beams=3, length_penalty=length_penalty, early_stopping=early_stopping)
        expected = engine_beams(engine, PROMPT, 8, params, SamplingParams(temperature=1.0, logit_bias=((EOS, 4.5),)))
        choices = complete(client, **body)["choices"]
        assert [choice["tokens"] for choice in choices] == [beam.token_ids for beam in expected]
        results[length_penalty] = [choice["tokens"] for choice in choices]
    assert results[0.0] != results[2.0]


@pytest.mark.parametrize("search_type", ["NAIVE_SAMPLING", "STOCHASTIC"])
def test_sampled_beam_searches_follow_their_seed(client, engine, search_type):
    body = beam_body(beam_search_type=search_type, temperature=0.8, top_k=50, seed=21)
    first, again = complete(client, **body)["choices"], complete(client, **body)["choices"]
    assert first == again
    params = BeamSearchParams(num_beams=3, search_type=search_type)
    expected = engine_beams(engine, PROMPT, 6, params, SamplingParams(temperature=0.8, top_k=50, seed=21))
    assert [choice["tokens"] for choice in first] == [beam.token_ids for beam in expected]
    assert complete(client, **{**body, "seed": 22})["choices"] != first


@pytest.mark.parametrize("fields, param", [
    ({"stream": True}, "stream"),
    ({"n": 2}, "n"),
    ({"stop": ["\n"]}, "stop"),
    ({"logprobs": 0}, "logprobs"),
    ({"include_output_logits": True}, "include_output_logits"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"top_k": 5}, "top_k"),  # DETERMINISTIC draws nothing
    ({"top_p": 0.5}, "top_p"),
    ({"temperature": 0.7}, "temperature"),
    ({"beam_search_type": "STOCHASTIC", "temperature": 0}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"num_beams": 1, "length_penalty": 2.0}, "length_penalty"),
    ({"num_beams": None, "early_stopping": True}, "early_stopping"),
])
def test_what_cannot_go_with_beams_is_a_400_naming_the_field(client, fields, param):
    response = client.post("/v1/completions", json=beam_body(**fields))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("num_beams", [0, 32])
def test_num_beams_outside_1_to_31_breaks_the_schema(client, num_beams):
    response = client.post("/v1/completions", json=beam_body(num_beams=num_beams))
    assert response.status_code == 422, response.text  # the Fireworks route's schema error
    assert response.json()["error"]["param"] == "num_beams"


def test_one_beam_and_a_type_without_beams_decode_as_usual(client):
    def tokens(**body):
        return [choice["tokens"] for choice in complete(client, **body)["choices"]]

    plain = tokens(tokens=PROMPT, max_tokens=5, temperature=0)
    assert len(plain) == 1
    assert tokens(**beam_body(num_beams=1, temperature=0, max_tokens=5)) == plain
    # The seed: beam_search_type "is ignored if num_beams is not provided".
    assert tokens(tokens=PROMPT, max_tokens=5, temperature=0, beam_search_type="STOCHASTIC") == plain
