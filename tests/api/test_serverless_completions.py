"""Friendli's serverless completions at /serverless/v1/completions on the tiny-model app: the
`token_sampled` / `complete` stream read as raw SSE, the whole answer, and the sampled
tokens' raw logits (`include_output_logits`) there and on /v1/completions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from completions_helpers import complete
from tiny_models import tiny_checkpoint

from engine.config import EngineConfig
from engine.device.runner import ModelRunner, RowPlan
from generated import friendli_serverless_completions as serverless

PATH = "/serverless/v1/completions"
GREEDY = {"prompt": "The serverless stream", "max_tokens": 12, "temperature": 0, "ignore_eos": True}


def raw_stream(client, body: dict) -> list[dict]:
    """The `data:` payloads of a streamed serverless completion, read line by line."""
    with client.stream("POST", PATH, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] != "data: [DONE]"  # the complete event is the last one
    return [json.loads(line[len("data: "):]) for line in lines]


def validated(events: list[dict]) -> list:
    return [serverless.ServerlessCompletionsStreamEvent.model_validate(event).root for event in events]


def test_token_sampled_events_join_to_the_complete_event_and_the_whole_answer(client):
    events = validated(raw_stream(client, GREEDY))
    *sampled, last = events
    assert all(isinstance(event, serverless.TokenSampledEvent) for event in sampled)
    assert isinstance(last, serverless.CompleteEvent)
    done, = last.choices
    whole = client.post(PATH, json=GREEDY).json()
    serverless.ServerlessCompletionsResponse.model_validate(whole)
    assert set(whole) == {"choices", "usage"} and set(whole["choices"][0]) == {"index", "seed", "text", "tokens"}
    assert "".join(event.text for event in sampled) == done.text == whole["choices"][0]["text"]
    assert [event.token for event in sampled] == done.tokens == whole["choices"][0]["tokens"]
    assert len(sampled) == 12 and all(event.index == 0 for event in sampled)
    # The same greedy answer as the container shape's.
    assert done.text == complete(client, **GREEDY)["choices"][0]["text"]
    assert last.usage.completion_tokens == 12
    assert last.usage.total_tokens == last.usage.prompt_tokens + 12
    # Token by token, as the seed's example shows: each event's text is its own token's.
    tokenizer = client.app.state.server.tokenizer
    assert sum(event.text == tokenizer.decode([event.token]) for event in sampled) >= 10


def test_every_choice_streams_its_own_tokens(client):
    body = {**GREEDY, "temperature": 1.0, "n": 3, "seed": 11, "max_tokens": 6}
    *sampled, last = validated(raw_stream(client, body))
    assert [choice.index for choice in last.choices] == [0, 1, 2]
    for choice in last.choices:
        own = [event for event in sampled if event.index == choice.index]
        assert "".join(event.text for event in own) == choice.text
        assert [event.token for event in own] == choice.tokens
    assert len({tuple(choice.tokens) for choice in last.choices}) > 1  # seeded, distinct


def test_a_stop_string_cuts_the_streamed_text_as_the_whole_one(client):
    whole = client.post(PATH, json=GREEDY).json()["choices"][0]
    stop = whole["text"][len(whole["text"]) // 2:][:3]
    body = {**GREEDY, "stop": [stop]}
    *sampled, last = validated(raw_stream(client, body))
    assert "".join(event.text for event in sampled) == last.choices[0].text == client.post(PATH, json=body).json()[
        "choices"][0]["text"]
    assert stop not in last.choices[0].text


@pytest.fixture(scope="module")
def reference_runner(tokenizer):
    """A runner of its own on the app's tiny weights, for the logits of whole sequences."""
    checkpoint = tiny_checkpoint(tokenizer.vocab_size)
    config = EngineConfig(max_model_len=128, max_num_seqs=1, max_num_batched_tokens=64, num_pages=16)
    return ModelRunner(checkpoint.config, config, checkpoint.params)


def expected_logits(runner, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """The raw logit of each of `tokens` after `prompt` and the tokens before it."""
    logits = runner.hidden_logits([RowPlan(prompt + tokens, 0, list(range(1, 9)))])
    return logits[np.arange(len(prompt) - 1, len(prompt) - 1 + len(tokens)), tokens]


def test_include_output_logits_gives_raw_logits(client, tokenizer, reference_runner):
    """Sampled hot and truncated, the logits are still the model's own, before processing."""
    prompt = tokenizer.encode("Logits of the sampled tokens")
    body = {"tokens": prompt, "max_tokens": 10, "ignore_eos": True, "temperature": 0.8, "top_k": 5, "seed": 3,
            "repetition_penalty": 1.3, "include_output_logits": True, "include_output_logprobs": True}
    whole = client.post(PATH, json=body).json()["choices"][0]
    expected = expected_logits(reference_runner, prompt, whole["tokens"])
    np.testing.assert_allclose(whole["logits"], expected, rtol=1e-4, atol=1e-4)
    assert len(whole["logprobs"]) == len(whole["tokens"]) and all(lp <= 0 for lp in whole["logprobs"])
    # The stream's events carry the same numbers, token by token.
    *sampled, last = validated(raw_stream(client, body))
    np.testing.assert_allclose([event.logit for event in sampled], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose([event.logprob for event in sampled], whole["logprobs"], rtol=1e-5)
    assert last.choices[0].logits == [event.logit for event in sampled]
    # The container shape: `logits` beside `tokens`, whole and per chunk.
    choice = complete(client, **body)["choices"][0]
    np.testing.assert_allclose(choice["logits"], expected, rtol=1e-4, atol=1e-4)
    chunks = raw_container_stream(client, body)
    assert [logit for chunk in chunks for logit in chunk["choices"][0]["logits"]] == choice["logits"]


def raw_container_stream(client, body: dict) -> list[dict]:
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: "):]) for line in lines[:-1]]


def test_without_the_flags_no_logits_or_logprobs_appear(client):
    *sampled, last = raw_stream(client, GREEDY)
    assert all(set(event) == {"event", "index", "text", "token"} for event in sampled)
    assert set(last["choices"][0]) == {"index", "seed", "text", "tokens"}
    assert "logits" not in complete(client, **GREEDY)["choices"][0]
