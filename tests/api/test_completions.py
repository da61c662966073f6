"""POST /v1/completions on the tiny-model app: prompts, choices, stops, seeds, usage, extras."""

from __future__ import annotations

import logging

from completions_helpers import MODEL, complete, greedy, server_state, stream_events
from prometheus_client.parser import text_string_to_metric_families

from engine.host.request import choice_seeds
from generated import friendli_container_completions as friendli
from generated.fireworks_completions import CompletionResponse


def test_an_unknown_model_is_404(client):
    response = client.post("/v1/completions", json={"model": "gpt-9", "prompt": "hi", "max_tokens": 1})
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "model"
    assert response.json()["error"]["code"] == "model_not_found"
    # The served id, or no model at all (Friendli), are served; so is the Fireworks base path.
    assert complete(client, model=MODEL, prompt="hi", max_tokens=1)["model"] == MODEL
    assert complete(client, prompt="hi", max_tokens=1)["model"] == MODEL
    assert complete(client, "/inference/v1/completions", model=MODEL, prompt="hi", max_tokens=1)["model"] == MODEL


def test_every_prompt_form_is_one_prompt_each(client, tokenizer):
    text = "The capital of France is"
    ids = tokenizer.encode(text)
    forms = [{"prompt": text}, {"prompt": [text]}, {"prompt": ids}, {"prompt": [ids]}, {"tokens": ids}]
    choices = [greedy(client, max_tokens=4, return_token_ids=True, **form) for form in forms]
    assert all(choice["prompt_token_ids"] == ids for choice in choices)
    assert len({tuple(choice["token_ids"]) for choice in choices}) == 1  # greedy: the same output
    assert len({choice["text"] for choice in choices}) == 1


def test_choice_index_is_prompt_index_times_n_plus_i(client, tokenizer):
    prompts = ["first prompt", "a second, longer prompt"]
    body = complete(client, prompt=prompts, n=3, seed=99, max_tokens=2, return_token_ids=True)
    choices = body["choices"]
    assert [c["index"] for c in choices] == list(range(6))
    seeds = choice_seeds(99, 3, draw=None)
    for choice in choices:
        prompt_index, i = divmod(choice["index"], 3)
        assert choice["prompt_token_ids"] == tokenizer.encode(prompts[prompt_index])
        assert choice["seed"] == seeds[i]  # choice i of every prompt uses the i-th seed
    # Usage counts each prompt once and every choice's tokens.
    usage = body["usage"]
    assert usage["prompt_tokens"] == sum(len(tokenizer.encode(p)) for p in prompts)
    assert usage["completion_tokens"] == sum(len(c["tokens"]) for c in choices)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_stop_strings_are_found_across_token_boundaries(client, tokenizer):
    prompt = "Once upon a time"
    full = greedy(client, prompt, max_tokens=12, return_token_ids=True)
    pieces = [tokenizer.decode([t], skip_special_tokens=True) for t in full["token_ids"]]
    # A stop string made of the end of one token and the start of the next.
    k = next(k for k in range(1, len(pieces) - 1) if len(pieces[k]) >= 2 and len(pieces[k + 1]) >= 2)
    stop = pieces[k][-2:] + pieces[k + 1][:2]
    expected = full["text"][: full["text"].find(stop)]
    stopped = greedy(client, prompt, max_tokens=12, stop=[stop, "never-in-the-text-§"])
    assert stopped["text"] == expected and stopped["finish_reason"] == "stop"
    assert complete(client, prompt=prompt, max_tokens=12, temperature=0, ignore_eos=True,
                    stop=stop)["choices"][0]["text"] == expected  # a single string works too
    events = stream_events(client, prompt=prompt, max_tokens=12, temperature=0, ignore_eos=True, stop=stop)
    assert "".join(e["choices"][0]["text"] for e in events) == expected
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_max_tokens_bounds_the_output(client):
    assert len(greedy(client, "Count", max_tokens=3)["tokens"]) == 3
    choice = complete(client, prompt="Count", max_completion_tokens=2, temperature=0, ignore_eos=True)["choices"][0]
    assert len(choice["tokens"]) == 2 and choice["finish_reason"] == "length"


def test_a_seed_reproduces_choices_that_differ(client):
    body = {"prompt": "Tell me a story", "n": 3, "seed": 1234, "temperature": 1.0, "max_tokens": 6, "ignore_eos": True}
    first = complete(client, **body)["choices"]
    again = complete(client, **body)["choices"]
    assert [c["text"] for c in first] == [c["text"] for c in again]
    assert len({tuple(c["tokens"]) for c in first}) == 3  # the choices differ from each other
    single = complete(client, **{**body, "n": 1})["choices"][0]
    assert single["tokens"] == first[0]["tokens"] and single["seed"] == 1234
    # Friendli: one seed per choice.
    listed = complete(client, **{**body, "seed": [7, 8, 9]})["choices"]
    assert [c["seed"] for c in listed] == [7, 8, 9]
    assert listed[0]["tokens"] == complete(client, **{**body, "n": 1, "seed": 7})["choices"][0]["tokens"]


def test_usage_reports_prefix_cache_hits(client, tokenizer):
    # A prompt no other test sends, longer than a few KV pages (16 tokens each).
    prompt = "cache probe " + " ".join(f"w{i}" for i in range(40))
    num_tokens = len(tokenizer.encode(prompt))
    cold = complete(client, prompt=prompt, max_tokens=1)["usage"]
    warm = complete(client, prompt=prompt, max_tokens=1)["usage"]
    assert cold["prompt_tokens"] == warm["prompt_tokens"] == num_tokens
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0
    page = server_state(client).running_engine.engine.config.page_size
    assert warm["prompt_tokens_details"]["cached_tokens"] == (num_tokens - 1) // page * page


def test_response_validates_against_both_dialects(client):
    body = complete(client, prompt="Hello", max_tokens=3, temperature=0)
    choice_extras = [{k: c.pop(k) for k in ("seed", "tokens")} for c in body["choices"]]
    CompletionResponse.model_validate(body)  # Fireworks' (extra fields forbidden)
    for choice, extras in zip(body["choices"], choice_extras):
        choice.update(extras)
    friendli.CompletionsResult.model_validate(body)  # Friendli's, with seed and tokens required


def test_return_token_ids(client, tokenizer):
    choice = greedy(client, "Numbers:", max_tokens=5, return_token_ids=True)
    assert choice["prompt_token_ids"] == tokenizer.encode("Numbers:")
    assert choice["token_ids"] == choice["tokens"] and len(choice["token_ids"]) == 5
    assert tokenizer.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]
    plain = greedy(client, "Numbers:", max_tokens=5)
    assert "token_ids" not in plain and "prompt_token_ids" not in plain


def test_raw_output_shows_what_the_model_saw(client, tokenizer):
    choice = greedy(client, "Raw", max_tokens=3, raw_output=True, logprobs=True)
    raw = choice["raw_output"]
    assert raw["prompt_fragments"] == ["Raw"] and raw["prompt_token_ids"] == tokenizer.encode("Raw")
    assert raw["completion_token_ids"] == choice["tokens"]
    assert raw["completion"] == tokenizer.decode(choice["tokens"])
    assert [e["token_id"] for e in raw["completion_logprobs"]["content"]] == choice["tokens"]


def test_perf_metrics_in_headers_and_body(client):
    response = client.post("/v1/completions", json={"prompt": "Speed", "max_tokens": 2, "perf_metrics_in_response": True})
    usage, metrics = response.json()["usage"], response.json()["perf_metrics"]
    headers = response.headers
    assert int(headers["fireworks-prompt-tokens"]) == usage["prompt_tokens"] == metrics["prompt-tokens"]
    assert int(headers["fireworks-cached-prompt-tokens"]) == metrics["cached-prompt-tokens"]
    ttft, total = float(headers["fireworks-server-time-to-first-token"]), float(headers["fireworks-server-processing-time"])
    assert 0 < ttft <= total == metrics["server-processing-time"]
    # Without the flag: the headers still, no body field.
    plain = client.post("/v1/completions", json={"prompt": "Speed", "max_tokens": 2})
    assert "fireworks-server-processing-time" in plain.headers and "perf_metrics" not in plain.json()
    # Streamed: only in the chunk that finishes the last choice.
    events = stream_events(client, prompt="Speed", max_tokens=2, n=2, perf_metrics_in_response=True)
    with_metrics = [i for i, e in enumerate(events) if "perf_metrics" in e]
    assert with_metrics == [len(events) - 1] and events[-1]["choices"][0]["finish_reason"] is not None


def test_context_length_exceeded_truncates_or_refuses(client):
    max_model_len = server_state(client).running_engine.engine.config.max_model_len
    prompt = [100 + i for i in range(max_model_len - 6)]
    choice = complete(client, prompt=prompt, max_tokens=100, ignore_eos=True)["choices"][0]
    assert len(choice["tokens"]) == 6 and choice["finish_reason"] == "length"  # max_tokens lowered
    refused = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 100,
                                                   "context_length_exceeded_behavior": "error"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt"
    fits = complete(client, prompt=prompt, max_tokens=6, ignore_eos=True, context_length_exceeded_behavior="error")
    assert len(fits["choices"][0]["tokens"]) == 6


def test_tracing_fields_are_logged(client, caplog):
    with caplog.at_level(logging.INFO, logger="flint"):
        complete(client, prompt="trace", max_tokens=1, user="user-42", prompt_cache_key="session-7",
                 metadata={"team": "evals"})
    logged = caplog.text
    assert "user-42" in logged and "session-7" in logged and "evals" in logged


def test_a_timeout_while_queued_is_429(client):
    # A microsecond is over before the engine thread can even pick the request up.
    response = client.post("/v1/completions", json={"prompt": "late", "max_tokens": 50, "timeout": 1e-6})
    assert response.status_code == 429 and response.json()["error"]["param"] == "timeout"
    engine = server_state(client).running_engine
    assert engine.num_in_flight == 0  # aborted, not left running
    assert complete(client, prompt="late", max_tokens=2, timeout=60)["choices"][0]["finish_reason"] == "length"


def test_finished_choices_are_counted_in_metrics(client, tokenizer):
    def counters():
        text = client.get("/metrics").text
        return {sample.name: sample.value for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name in ("flint:prompt_tokens_total",
                                                                "flint:generation_tokens_total",
                                                                "flint:e2e_request_latency_seconds_count")}

    before = counters()
    complete(client, prompt="metrics probe", n=2, max_tokens=3, ignore_eos=True)
    after = counters()
    # Each choice is one engine request: its prompt and its tokens count once.
    assert after["flint:prompt_tokens_total"] - before["flint:prompt_tokens_total"] == 2 * len(tokenizer.encode("metrics probe"))
    assert after["flint:generation_tokens_total"] - before["flint:generation_tokens_total"] == 2 * 3
    assert after["flint:e2e_request_latency_seconds_count"] - before["flint:e2e_request_latency_seconds_count"] == 2
