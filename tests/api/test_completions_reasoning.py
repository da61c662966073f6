"""Reasoning on /v1/completions, on the tiny Qwen3-style app: a reasoning control splits the
thinking off the text (`reasoning_content`, whole and streamed, its tokens counted); without
one the text is raw; history controls and beams are refused; and the serverless route,
whose events have no place for thinking, refuses asking for it. Expectations come from the
generated token ids the answer returns (`tokens`), never from a hard-coded output."""

from __future__ import annotations

import json

import pytest

from reasoning_helpers import END_ID, NEVER_ENDS, START_ID, posted, texts

PROMPT = "Q: What is 6 x 7?\nA:"


@pytest.fixture(scope="module")
def client(qwen3_client):
    return qwen3_client


def body(**fields) -> dict:
    return {"prompt": PROMPT, "max_tokens": 16, "temperature": 1.0, "seed": 3, **fields}


def complete(client, path="/v1/completions", **fields) -> dict:
    return posted(client, path, body(**fields))


def error_param(client, path="/v1/completions", **fields) -> str:
    return posted(client, path, body(**fields), status=400)["error"]["param"]


def streamed(client, **fields) -> list[dict]:
    response = client.post("/v1/completions", json=body(stream=True, **fields))
    assert response.status_code == 200, response.text
    frames = [frame for frame in response.text.split("\n\n") if frame and frame != "data: [DONE]"]
    return [json.loads(frame[len("data: "):]) for frame in frames]


def test_reasoning_controls_split_the_thinking_off(client, tokenizer):
    # A budget of 7 opens the section (forced), allows 7 thoughts, then forces the end tag
    # (the built-in bridge is longer than 7 tokens, so it is left out).
    answer = complete(client, reasoning_effort=7, logit_bias=NEVER_ENDS)
    choice = answer["choices"][0]
    ids = choice["tokens"]
    assert ids[0] == START_ID and ids[8] == END_ID
    thoughts, text = texts(tokenizer, ids)
    assert choice["reasoning_content"] == (thoughts or None) and choice["text"] == text
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 9}
    chunks = streamed(client, reasoning_effort=7, logit_bias=NEVER_ENDS, stream_options={"include_usage": True})
    pieces = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
    assert "".join(piece.get("reasoning_content") or "" for piece in pieces) == (choice["reasoning_content"] or "")
    assert "".join(piece["text"] for piece in pieces) == choice["text"]
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 9}


def test_no_control_leaves_the_text_raw_and_none_forbids_thinking(client, tokenizer):
    raw = complete(client, logit_bias={str(START_ID): 100})  # the model would open a section
    assert raw["choices"][0]["tokens"][0] == START_ID and "reasoning_content" not in raw["choices"][0]
    assert raw["choices"][0]["text"] == tokenizer.decode(raw["choices"][0]["tokens"], skip_special_tokens=True)
    assert "completion_tokens_details" not in raw["usage"]
    banned = complete(client, reasoning_effort="none", logit_bias={str(START_ID): 100})
    assert START_ID not in banned["choices"][0]["tokens"] and banned["choices"][0]["reasoning_content"] is None
    assert banned["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_a_prompt_that_opens_the_section_begins_inside_it(client, tokenizer):
    # The end tag banned: closed at once all the same (forced), and never drawn again in the answer.
    answer = complete(client, prompt=PROMPT + "<think>\n", thinking={"type": "disabled"}, logit_bias=NEVER_ENDS)
    ids = answer["choices"][0]["tokens"]
    assert ids[0] == END_ID and END_ID not in ids[1:]  # closed at once: no thinking asked
    assert answer["choices"][0]["text"] == tokenizer.decode(ids[1:], skip_special_tokens=True).lstrip("\n")


def test_a_thinking_budget_ends_with_its_phrase(client, tokenizer):
    phrase = " Enough."
    bridge = tokenizer.encode_plain(phrase)
    answer = complete(client, thinking={"type": "enabled", "budget_tokens": 1024, "budget_end_str": phrase},
                      logit_bias=NEVER_ENDS, max_tokens=1030)
    ids = answer["choices"][0]["tokens"]
    assert ids[0] == START_ID and ids[1025] == END_ID and ids[1025 - len(bridge): 1025] == bridge
    assert answer["choices"][0]["reasoning_content"] == texts(tokenizer, ids)[0]
    assert answer["choices"][0]["reasoning_content"].endswith(phrase.strip())


def test_history_controls_are_for_chat(client):
    assert error_param(client, reasoning_history="preserved") == "reasoning_history"
    assert error_param(client, thinking={"type": "enabled", "keep": "all"}) == "thinking.keep"
    assert error_param(client, reasoning_effort="low", thinking={"type": "enabled"}) == "thinking"


def test_reasoning_is_refused_beside_beams_and_on_the_serverless_route(client):
    assert error_param(client, reasoning_effort="low", num_beams=2) == "reasoning_effort"
    assert error_param(client, "/serverless/v1/completions", reasoning_effort="low") == "reasoning_effort"
    # Asking for no thinking needs no place in the events.
    answer = complete(client, "/serverless/v1/completions", reasoning_effort="none", logit_bias={str(START_ID): 100})
    assert START_ID not in answer["choices"][0]["tokens"]
