"""Chat completions on a live server with the embedded SmolLM2, driven by the `openai` SDK."""

from __future__ import annotations

import httpx
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name a colour of the sky."}]


@pytest.fixture(scope="module")
def greedy(sdk):
    """One greedy reply (8 tokens at most) that several tests compare against."""
    return create(sdk)


def create(sdk, **fields):
    return sdk.chat.completions.create(model=MODEL_ID, messages=MESSAGES, **{
        "temperature": 0, "max_completion_tokens": 8, **fields})


def test_chat_completion_usage_counts_the_rendered_prompt(greedy, live_server, smollm2_tokenizer):
    reply = greedy
    prompt = smollm2_tokenizer.encode(smollm2_tokenizer.render_chat(MESSAGES), add_special_tokens=False)
    tokenized = httpx.post(f"{live_server}/v1/tokenize", json={"model": MODEL_ID, "messages": MESSAGES})
    assert reply.usage.prompt_tokens == len(prompt) == tokenized.json()["count"]
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.usage.prompt_tokens_details.cached_tokens >= 0
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length") and reply.model == MODEL_ID


def test_streamed_chat_matches_the_whole_reply(sdk, greedy):
    whole = greedy.choices[0].message.content
    chunks = list(create(sdk, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_three_seeded_choices_repeat(sdk):
    fields = {"n": 3, "seed": 1234, "temperature": 1.0, "max_completion_tokens": 6}
    texts = [c.message.content for c in create(sdk, **fields).choices]
    assert [c.message.content for c in create(sdk, **fields).choices] == texts
    assert len(texts) == 3 and len(set(texts)) > 1


def test_stop_strings_end_the_reply(sdk, greedy):
    whole = greedy.choices[0].message.content
    stop = whole[len(whole) // 2: len(whole) // 2 + 2]
    cut = create(sdk, stop=[stop]).choices[0]
    assert cut.message.content == whole[: whole.find(stop)]
    assert cut.finish_reason == "stop"


def test_logprobs_with_top_alternatives(sdk, smollm2_tokenizer):
    reply = create(sdk, logprobs=True, top_logprobs=3)
    choice, content = reply.choices[0], reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    for entry in content:
        tops = [top.logprob for top in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry.bytes == entry.top_logprobs[0].bytes  # greedy: the likeliest token
        assert entry.logprob == pytest.approx(tops[0]) and entry.logprob <= 0
    tokens = [bytes(entry.bytes) for entry in content]
    if choice.finish_reason == "stop":  # the end-of-turn token is scored but not shown
        assert tokens.pop() in {smollm2_tokenizer.token_bytes(i) for i in smollm2_tokenizer.eos_token_ids}
    assert b"".join(tokens).decode() == choice.message.content
