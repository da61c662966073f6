"""Sampling fields of /v1/completions reach the engine's SamplingParams, and the token-level
controls (logit bias, bad words, stop tokens, forced tokens, total lengths) act on the output."""

from __future__ import annotations

import pytest

from completions_helpers import complete, greedy, server_state


def engine_request(client, engine_requests, **fields):
    """The engine Request (of the first choice) a completion with `fields` makes."""
    before = len(engine_requests)
    response = client.post("/v1/completions", json={"prompt": "sampling", **fields})
    assert response.status_code == 200, response.text
    return engine_requests[before]


def setting(request, name: str):
    """`stop.max_tokens` is request.stop.max_tokens; other names are SamplingParams fields."""
    owner, _, attribute = name.rpartition(".")
    return getattr(request.stop if owner == "stop" else request.sampling, attribute)


@pytest.mark.parametrize("fields, expected", [
    ({"temperature": 0.3}, {"temperature": 0.3}),
    ({"top_k": 7}, {"top_k": 7}),
    ({"top_p": 0.9}, {"top_p": 0.9}),
    ({"min_p": 0.05}, {"min_p": 0.05}),
    ({"typical_p": 0.8}, {"typical_p": 0.8}),
    ({"xtc_threshold": 0.2, "xtc_probability": 0.5}, {"xtc_threshold": 0.2, "xtc_probability": 0.5}),
    ({"frequency_penalty": 0.5, "presence_penalty": -0.5}, {"frequency_penalty": 0.5, "presence_penalty": -0.5}),
    ({"repetition_penalty": 1.3}, {"repetition_penalty": 1.3}),
    ({"mirostat_target": 5.0, "mirostat_lr": 0.2}, {"mirostat_target": 5.0, "mirostat_lr": 0.2}),
    ({"min_tokens": 4}, {"stop.min_tokens": 4}),
    ({"min_total_tokens": 9}, {"stop.min_total_tokens": 9}),
    ({"no_repeat_ngram": 3}, {"no_repeat_ngram_size": 3}),
    ({"no_repeat_ngram": 1}, {"no_repeat_ngram_size": 0}),  # Friendli: 1 means off
    ({"ignore_eos": True}, {"stop.ignore_eos": True}),
    ({"logit_bias": {"12": -5, "30": 2.5}}, {"logit_bias": ((12, -5.0), (30, 2.5))}),
    ({"forced_output_tokens": [3, 4]}, {"forced_output_tokens": (3, 4)}),
    ({"stop_tokens": [{"tokens": [5, 6]}], "eos_token": [7]}, {"stop.token_ids": (5, 6, 7)}),
    ({"stop": ["a", "bc"]}, {"stop.strings": ("a", "bc")}),
    ({"bad_word_tokens": [{"tokens": [8, 9]}]}, {"bad_word_tokens": ((8, 9),)}),
    ({"max_tokens": 11}, {"stop.max_tokens": 11}),
    ({"seed": 77}, {"seed": 77}),
    ({"logprobs": 3}, {"logprobs": 3, "prompt_logprobs": None}),
    ({"logprobs": True, "top_logprobs": 4, "echo": True}, {"logprobs": 4, "prompt_logprobs": 4}),
    ({}, {"temperature": 1.0, "stop.max_tokens": 16, "top_k": 0, "logprobs": None}),
])
def test_sampling_fields_reach_the_engine(client, engine_requests, fields, expected):
    request = engine_request(client, engine_requests, **fields)
    assert {name: setting(request, name) for name in expected} == expected


def test_bad_words_are_tokenized_without_special_tokens(client, engine_requests, tokenizer):
    sampling = engine_request(client, engine_requests, bad_words=["hello world", "x"]).sampling
    assert sampling.bad_word_tokens == (tuple(tokenizer.encode("hello world", add_special_tokens=False)),
                                        tuple(tokenizer.encode("x", add_special_tokens=False)))


def test_logit_bias_forces_a_token(client):
    choice = greedy(client, "Bias", max_tokens=4, logit_bias={"1234": 100})
    assert choice["tokens"] == [1234] * 4
    assert 1234 not in greedy(client, "Bias", max_tokens=4)["tokens"]


def test_bad_words_are_never_generated(client, tokenizer):
    free = greedy(client, "Banned words", max_tokens=6)["tokens"]
    banned = greedy(client, "Banned words", max_tokens=6, bad_word_tokens=[{"tokens": [free[0]]}])["tokens"]
    assert free[0] not in banned and banned[0] != free[0]
    word = tokenizer.decode([free[0]])
    if tokenizer.encode(word, add_special_tokens=False) == [free[0]]:  # the word is that one token
        assert free[0] not in greedy(client, "Banned words", max_tokens=6, bad_words=[word])["tokens"]


def test_stop_tokens_end_generation(client):
    free = greedy(client, "Stop tokens", max_tokens=8)["tokens"]
    stop = free[3]
    expected = free[: free.index(stop) + 1]  # the stop token is generated, its text left out
    for body in ({"stop_tokens": [{"tokens": [stop]}]}, {"eos_token": [stop]}):
        choice = complete(client, prompt="Stop tokens", max_tokens=8, temperature=0, **body)["choices"][0]
        assert choice["tokens"] == expected and choice["finish_reason"] == "stop"


def test_forced_output_tokens_come_first(client):
    assert greedy(client, "Forced", max_tokens=5, forced_output_tokens=[500, 600, 700])["tokens"][:3] == [500, 600, 700]


def test_total_token_bounds(client, tokenizer):
    prompt = tokenizer.encode("Total bounds")
    assert len(greedy(client, prompt, max_tokens=None, max_total_tokens=len(prompt) + 3)["tokens"]) == 3
    eos = server_state(client).running_engine.engine.eos_token_ids
    favour_eos = {str(i): 100 for i in eos}
    assert len(complete(client, prompt=prompt, max_tokens=6, temperature=0, logit_bias=favour_eos)["choices"][0]["tokens"]) == 1
    floor = complete(client, prompt=prompt, max_tokens=8, temperature=0, min_total_tokens=len(prompt) + 4,
                     logit_bias=favour_eos)["choices"][0]
    # EOS is banned until the sequence holds 4 outputs; the 5th is EOS.
    assert len(floor["tokens"]) == 5 and floor["tokens"][-1] in eos and floor["finish_reason"] == "stop"
