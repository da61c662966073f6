"""/v1/completions on a live server with the embedded SmolLM2, driven by the `openai` SDK
and by raw httpx for the SSE framing. Expected values come from the server's own
/v1/tokenize and from properties of the outputs, never from hard-coded model text."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
PROMPT = "The three primary colours are"


def token_ids(live_server: str, text: str) -> list[int]:
    response = httpx.post(f"{live_server}/v1/tokenize", json={"model": MODEL_ID, "prompt": text})
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def test_streamed_and_whole_completions_agree_and_usage_counts_tokens(sdk, live_server):
    whole = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=12, temperature=0)
    assert whole.usage.prompt_tokens == len(token_ids(live_server, PROMPT))
    assert whole.usage.completion_tokens == len(whole.choices[0].model_extra["tokens"])
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    chunks = list(sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=12, temperature=0,
                                         stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # The Fireworks base URL serves the same API.
    fireworks = openai.OpenAI(base_url=f"{live_server}/inference/v1", api_key="x", max_retries=0)
    again = fireworks.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=12, temperature=0)
    assert again.choices[0].text == whole.choices[0].text


def test_n_choices_with_a_seed_differ_and_reproduce(sdk):
    request = dict(model=MODEL_ID, prompt="My favourite animal is", max_tokens=10, temperature=1.0, n=3, seed=2024)
    first = sdk.completions.create(**request)
    again = sdk.completions.create(**request)
    texts = [c.text for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert texts == [c.text for c in again.choices]
    assert len(set(texts)) == 3


def test_stop_strings_cut_the_text(sdk):
    free = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0).choices[0].text
    words = free.split()
    assert len(words) >= 3, free
    stop = words[2]
    cut = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop, "\n\n\n"])
    assert cut.choices[0].text == free[: free.find(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0, stop=stop,
                                      stream=True)
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text


def test_logprobs_in_both_formats(sdk):
    legacy = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2)
    lp = legacy.choices[0].logprobs
    assert "".join(lp.tokens) == legacy.choices[0].text and len(lp.token_logprobs) == 5
    assert all(token in top and len(top) <= 3 for token, top in zip(lp.tokens, lp.top_logprobs))
    content = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=True,
                                     extra_body={"top_logprobs": 2}).choices[0].logprobs.model_extra["content"]
    assert [e["token"] for e in content] == lp.tokens
    assert [e["logprob"] for e in content] == pytest.approx(lp.token_logprobs, abs=1e-4)
    assert all(len(e["top_logprobs"]) == 2 for e in content)


def test_echo_with_max_tokens_zero_scores_the_prompt(sdk, live_server):
    """lm-eval's loglikelihood request."""
    scored = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1, temperature=0)
    choice = scored.choices[0]
    ids = token_ids(live_server, PROMPT)
    assert choice.text == PROMPT and choice.finish_reason == "length"
    assert choice.logprobs.token_logprobs[0] is None and len(choice.logprobs.token_logprobs) == len(ids)
    assert scored.usage.completion_tokens == 0 and scored.usage.prompt_tokens == len(ids)
    # The logprob of the prompt's last token equals that of generating it from the rest.
    forced = sdk.completions.create(model=MODEL_ID, prompt=ids[:-1], max_tokens=1, logprobs=0,
                                    extra_body={"forced_output_tokens": [ids[-1]]})
    assert forced.choices[0].logprobs.token_logprobs[0] == pytest.approx(choice.logprobs.token_logprobs[-1], abs=1e-3)


def test_sse_framing_byte_for_byte(live_server):
    body = {"model": MODEL_ID, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{live_server}/v1/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        raw = b"".join(response.iter_bytes())
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    for event in events[:-2]:
        assert event.startswith(b"data: {") and b"\n" not in event  # one line of JSON per event
        chunk = json.loads(event[len(b"data: "):])
        assert chunk["object"] == "text_completion" and chunk["model"] == MODEL_ID


def test_a_dropped_stream_aborts_every_choice(live_server, live_state):
    engine = live_state.running_engine.engine
    free_pages = engine.block_manager.num_free_pages
    body = {"model": MODEL_ID, "prompt": "Write a very long essay", "max_tokens": 600, "ignore_eos": True,
            "n": 3, "stream": True}
    with httpx.Client(base_url=live_server, timeout=120) as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            assert engine.scheduler.num_running + engine.scheduler.num_waiting == 3
    deadline = time.monotonic() + 10
    while engine.scheduler.has_unfinished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not engine.scheduler.has_unfinished
    assert engine.block_manager.num_free_pages == free_pages  # (cached pages count as free: evictable)
