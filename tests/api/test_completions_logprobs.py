"""Logprobs of /v1/completions: both formats, echo, and max_tokens 0 (lm-eval's loglikelihood).

The reference for a generated token's logprob is independent of the generation: the same
tokens sent back as a prompt and scored with echo and max_tokens 0 (teacher forcing)."""

from __future__ import annotations

import math

import pytest

from completions_helpers import complete, greedy


def score(client, token_ids, top: int = 0) -> dict:
    """The loglikelihood call: echo, logprobs and max_tokens 0 over `token_ids`."""
    return complete(client, prompt=token_ids, max_tokens=0, echo=True, logprobs=top)["choices"][0]


def test_integer_logprobs_give_the_legacy_format(client, tokenizer):
    prompt = tokenizer.encode("Legacy logprobs")
    choice = greedy(client, prompt, max_tokens=5, logprobs=3)
    lp = choice["logprobs"]
    assert lp["tokens"] == [tokenizer.decode([t]) for t in choice["tokens"]]
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert token in top and top[token] == logprob  # the sampled token is always listed
        assert len(top) <= 4 and logprob == max(top.values())  # greedy picked the best
    # Teacher forcing: the generated tokens scored as a prompt have the same logprobs.
    scored = score(client, prompt + choice["tokens"])["logprobs"]["token_logprobs"]
    assert scored[len(prompt):] == pytest.approx(lp["token_logprobs"], abs=1e-4)


def test_boolean_logprobs_give_the_content_format(client, tokenizer):
    choice = greedy(client, "Content logprobs", max_tokens=4, logprobs=True, top_logprobs=2)
    content = choice["logprobs"]["content"]
    assert [e["token_id"] for e in content] == choice["tokens"]
    legacy = greedy(client, "Content logprobs", max_tokens=4, logprobs=2)["logprobs"]
    assert [e["logprob"] for e in content] == pytest.approx(legacy["token_logprobs"])
    for entry in content:
        assert bytes(entry["bytes"]).decode() == entry["token"] == tokenizer.decode([entry["token_id"]])
        assert len(entry["top_logprobs"]) == 2 and entry["top_logprobs"][0]["token_id"] == entry["token_id"]
        assert entry["sampling_logprob"] <= 0 and entry["logprob"] <= 0
    none = greedy(client, "Content logprobs", max_tokens=2, logprobs=True)["logprobs"]["content"]
    assert all(entry["top_logprobs"] == [] for entry in none)  # top_logprobs left out: no alternatives


def test_echo_puts_prompt_logprobs_first(client, tokenizer):
    prompt = "The echo test"
    ids = tokenizer.encode(prompt)
    choice = greedy(client, prompt, max_tokens=2, echo=True, logprobs=1)
    lp = choice["logprobs"]
    assert choice["text"].startswith(prompt) and len(lp["tokens"]) == len(ids) + 2
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # no context
    assert lp["text_offset"][len(ids)] == len(prompt)
    assert lp["token_logprobs"][1:len(ids)] == pytest.approx(score(client, ids)["logprobs"]["token_logprobs"][1:])
    content = greedy(client, prompt, max_tokens=2, echo=True, logprobs=True)["logprobs"]["content"]
    assert content[0]["logprob"] is None and [e["token_id"] for e in content[:len(ids)]] == ids


def test_max_tokens_zero_is_a_loglikelihood_call(client, tokenizer):
    ids = tokenizer.encode("Paris is the capital of France")
    body = complete(client, prompt=ids, max_tokens=0, echo=True, logprobs=1)
    (choice,) = body["choices"]
    assert choice["tokens"] == [] and choice["finish_reason"] == "length"
    assert choice["text"] == tokenizer.decode(ids)
    assert body["usage"]["completion_tokens"] == 0 and body["usage"]["prompt_tokens"] == len(ids)
    logprobs = choice["logprobs"]["token_logprobs"]
    assert logprobs[0] is None and len(logprobs) == len(ids)
    assert all(lp <= 0 for lp in logprobs[1:])
    # Each prompt token's logprob is the one a generation from the preceding tokens gives it.
    for cut in (2, len(ids) - 1):
        forced = greedy(client, ids[:cut], max_tokens=1, logprobs=5, forced_output_tokens=[ids[cut]])
        assert forced["tokens"] == [ids[cut]]
        assert forced["logprobs"]["token_logprobs"][0] == pytest.approx(logprobs[cut], abs=1e-4)
    # Without echo or logprobs it is a valid, empty completion.
    bare = complete(client, prompt=ids, max_tokens=0)["choices"][0]
    assert bare["text"] == "" and bare["tokens"] == [] and bare["logprobs"] is None


def test_echo_last_echoes_the_prompt_suffix(client, tokenizer):
    ids = tokenizer.encode("only the last tokens are echoed")
    choice = complete(client, prompt=ids, max_tokens=0, echo_last=3, logprobs=0)["choices"][0]
    assert choice["text"] == tokenizer.decode(ids[-3:])
    lp = choice["logprobs"]
    assert lp["tokens"] == [tokenizer.decode([t]) for t in ids[-3:]]
    full = score(client, ids)["logprobs"]["token_logprobs"]
    assert lp["token_logprobs"] == pytest.approx(full[-3:])  # real logprobs: these have context


def test_include_output_logprobs_gives_token_logprobs(client):
    choice = greedy(client, "Friendli", max_tokens=3, include_output_logprobs=True)
    lp = choice["logprobs"]
    assert len(lp["token_logprobs"]) == 3 and all(math.isfinite(v) and v <= 0 for v in lp["token_logprobs"])
    assert all(list(top) == [token] for top, token in zip(lp["top_logprobs"], lp["tokens"]))
