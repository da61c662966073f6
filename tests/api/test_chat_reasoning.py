"""Reasoning in chat completions, on the tiny Qwen3-style app: `reasoning_content` apart from
the content, whole and streamed, its tokens counted, and every control that sets it.

The model is random: the budget (`reasoning_effort` as a number, `thinking.budget_tokens`)
drives it out of its thinking, and logit bias keeps it there. Expectations come from the
tokens it generated (read back from logprobs), the template's own rendering, and the
documented effort table.
"""

from __future__ import annotations

import json

import openai
import pytest
from chat_helpers import URL, sse_payloads
from reasoning_helpers import (
    CALL,
    END_ID,
    MODEL_ID,
    NEVER_ENDS,
    START_ID,
    TOOL,
    logprob_ids,
    posted,
    rendered,
    split_ids,
    texts,
    tool_loop,
)

from api.core.limits import MAX_BUDGET_END_CHARS
from api.core.reasoning import EFFORT_BUDGETS, ENABLED_EFFORT
from engine.text.reasoning import DEFAULT_BUDGET_END

USER = [{"role": "user", "content": "What is 6 x 7?"}]


@pytest.fixture(scope="module")
def client(qwen3_client):
    return qwen3_client


def body(**fields) -> dict:
    return {"model": MODEL_ID, "messages": USER, "max_completion_tokens": 16, "temperature": 1.0, "seed": 5, **fields}


def chat(client, **fields) -> dict:
    return posted(client, URL, body(**fields))


def error_param(client, **fields) -> str:
    return posted(client, URL, body(**fields), status=400)["error"]["param"]


FORMS = [("none", 0), ("minimal", 512), ("low", 1024), ("medium", 4096), ("high", 16384), ("xhigh", 32768),
         ("max", None), (True, EFFORT_BUDGETS[ENABLED_EFFORT]), (False, 0), (7, 7)]


@pytest.mark.parametrize("effort, budget", FORMS, ids=[repr(form) for form, _ in FORMS])
def test_every_reasoning_effort_form_sets_the_thinking_budget(client, tokenizer, engine_requests, effort, budget):
    chat(client, reasoning_effort=effort, max_completion_tokens=1)
    [request] = engine_requests
    thinks = budget != 0
    assert (request.reasoning.budget, request.reasoning.opens, request.reasoning.starts_inside) == (budget, thinks, False)
    assert budget == EFFORT_BUDGETS.get(effort if isinstance(effort, str) else "", budget)  # the documented table
    # Qwen3's switch: off writes the empty section into the prompt.
    assert request.prompt_token_ids == rendered(tokenizer, USER, enable_thinking=thinks)


def test_a_budget_splits_the_thinking_from_the_answer_and_counts_it(client, tokenizer):
    reply = chat(client, reasoning_effort=7, logprobs=True)
    choice = reply["choices"][0]
    ids = logprob_ids(choice)
    thoughts, answer = split_ids(ids)
    # The default phrase is longer than 7 tokens: the end tag comes right after 7 thoughts.
    assert len(tokenizer.encode_plain(DEFAULT_BUDGET_END)) > 7 and len(thoughts) == 7
    reasoning, content = texts(tokenizer, ids)
    assert (choice["message"]["reasoning_content"], choice["message"]["content"]) == (reasoning, content)
    details = reply["usage"]["completion_tokens_details"]
    assert details["reasoning_tokens"] == 9 and reply["usage"]["completion_tokens"] == len(ids) == 16
    assert START_ID not in answer


def test_without_a_control_the_template_decides_and_the_answer_still_splits(client, tokenizer, engine_requests):
    reply = chat(client, logit_bias={str(START_ID): 100, str(END_ID): 50}, logprobs=True, max_completion_tokens=6)
    [request] = engine_requests
    assert request.prompt_token_ids == rendered(tokenizer, USER) and request.reasoning.budget is None
    ids = logprob_ids(reply["choices"][0])
    assert ids[:2] == [START_ID, END_ID]  # pulled in and out of thinking at once
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] is None and message["content"] == texts(tokenizer, ids)[1]
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2


def test_a_thinking_budget_forces_its_end_phrase_then_the_end_tag(client, tokenizer):
    phrase = " So the answer is 42."
    bridge = tokenizer.encode_plain(phrase)
    for end_str, forced in ((phrase, bridge), ("", [])):
        reply = chat(client, thinking={"type": "enabled", "budget_tokens": 1024, "budget_end_str": end_str},
                     logit_bias=NEVER_ENDS, logprobs=True, max_completion_tokens=1030)
        ids = logprob_ids(reply["choices"][0])
        thoughts, _ = split_ids(ids)
        assert len(thoughts) == 1024 and thoughts[1024 - len(forced):] == forced and END_ID not in thoughts
        assert reply["choices"][0]["message"]["reasoning_content"] == texts(tokenizer, ids)[0]
        assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 1026


def test_a_budget_end_phrase_past_its_cap_is_refused(client):
    """The phrase is encoded as the request is planned, on the event loop: a cap keeps a
    phrase as long as the body limit from stalling every other request."""
    phrase = "x" * (MAX_BUDGET_END_CHARS + 1)
    assert error_param(client, thinking={"type": "enabled", "budget_end_str": phrase}) == "thinking.budget_end_str"


def test_thinking_and_its_options_are_checked(client):
    assert error_param(client, reasoning_effort="low", thinking={"type": "enabled"}) == "thinking"
    assert error_param(client, thinking={"type": "enabled", "budget_tokens": 100}) == "thinking.budget_tokens"
    assert error_param(client, thinking={"type": "enabled", "budget_end_str": 5}) == "thinking.budget_end_str"
    assert error_param(client, thinking={"type": "enabled", "budget_tokens": 2048,
                                         "budget_end_str": "</think>"}) == "thinking.budget_end_str"
    assert error_param(client, thinking={"type": "disabled", "keep": "all"}) == "thinking.keep"
    assert error_param(client, thinking={"type": "maybe"}) == "thinking"
    assert error_param(client, reasoning_effort=0) == "reasoning_effort"
    assert error_param(client, thinking={"type": "enabled", "keep": "all"}, reasoning_history="disabled") == \
        "reasoning_history"


@pytest.mark.parametrize("mode, kept", [(None, ("second",)), ("disabled", ()), ("interleaved", ("second",))])
def test_reasoning_history_decides_which_reasoning_reaches_the_prompt(client, tokenizer, engine_requests, mode, kept):
    messages = tool_loop("first thoughts", "second thoughts")
    fields = {"reasoning_history": mode} if mode else {}
    chat(client, messages=messages, max_completion_tokens=1, **fields)
    [request] = engine_requests
    expected = [{key: value for key, value in m.items()
                 if key != "reasoning_content" or (mode is None or m[key].startswith(kept))} for m in messages]
    assert request.prompt_token_ids == rendered(tokenizer, expected)
    prompt = tokenizer.decode(request.prompt_token_ids)
    assert ("second thoughts" in prompt) == bool(kept) and "first thoughts" not in prompt


def test_history_the_template_cannot_keep_is_refused(client):
    """Qwen3's template drops the reasoning of turns before the last user message."""
    messages = tool_loop("first thoughts", "second thoughts")
    assert error_param(client, messages=messages, reasoning_history="preserved") == "reasoning_history"
    assert error_param(client, messages=messages, thinking={"type": "enabled", "keep": "all"}) == "thinking.keep"
    # With no earlier turn's reasoning, there is nothing the template leaves out.
    chat(client, messages=tool_loop("", "second thoughts"), reasoning_history="preserved", max_completion_tokens=1)


def test_reasoning_streams_apart_from_the_content(client):
    whole = chat(client, reasoning_effort=7)
    response = client.post(URL, json=body(reasoning_effort=7, stream=True, stream_options={"include_usage": True}))
    chunks = sse_payloads(response.text)[:-1]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    kinds = [key for delta in deltas for key in ("reasoning_content", "content") if delta.get(key)]
    assert kinds == sorted(kinds, reverse=True)  # every piece of thinking before the answer
    message = whole["choices"][0]["message"]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]
    assert chunks[-1]["usage"] == whole["usage"]


def test_the_openai_sdk_reads_reasoning_content_from_model_extra(client):
    sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="not-needed", http_client=client, max_retries=0)
    completion = sdk.chat.completions.create(model=MODEL_ID, messages=USER, max_completion_tokens=16, seed=5,
                                             temperature=1.0, extra_body={"reasoning_effort": 7})
    whole = chat(client, reasoning_effort=7)
    message = completion.choices[0].message
    assert message.model_extra["reasoning_content"] == whole["choices"][0]["message"]["reasoning_content"]
    assert message.content == whole["choices"][0]["message"]["content"]
    assert completion.usage.completion_tokens_details.reasoning_tokens == 9
    stream = sdk.chat.completions.create(model=MODEL_ID, messages=USER, max_completion_tokens=16, seed=5,
                                         temperature=1.0, stream=True, extra_body={"reasoning_effort": 7})
    pieces = [chunk.choices[0].delta.model_extra.get("reasoning_content") or "" for chunk in stream if chunk.choices]
    assert "".join(pieces) == message.model_extra["reasoning_content"]


def test_tool_calls_and_formats_apply_to_the_answer_after_the_thinking(client, qwen3_tools_client):
    called = chat(qwen3_tools_client, reasoning_effort=7, tools=[TOOL], tool_choice="required",
                  max_completion_tokens=200)
    choice = called["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["reasoning_content"]
    calls = choice["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [(CALL["function"]["name"], {"by": 7})] * len(calls)
    assert called["usage"]["completion_tokens_details"]["reasoning_tokens"] == 9
    schema = {"type": "object", "properties": {"answer": {"enum": [42]}}, "required": ["answer"],
              "additionalProperties": False}
    formatted = chat(client, reasoning_effort=7, max_completion_tokens=200,
                     response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema,
                                                                              "strict": True}})
    message = formatted["choices"][0]["message"]
    assert json.loads(message["content"]) == {"answer": 42} and message["reasoning_content"]


def test_a_stored_completion_keeps_its_reasoning(client):
    reply = chat(client, reasoning_effort=7, store=True)
    stored = client.get(f"{URL}/{reply['id']}")
    assert stored.status_code == 200, stored.text
    assert stored.json()["choices"][0]["message"]["reasoning_content"] == \
        reply["choices"][0]["message"]["reasoning_content"]
    assert stored.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 9


NOT_REASONING = [({"reasoning_effort": "high"}, "reasoning_effort"), ({"reasoning_effort": True}, "reasoning_effort"),
                 ({"reasoning_effort": 64}, "reasoning_effort"), ({"thinking": {"type": "enabled"}}, "thinking"),
                 ({"reasoning_history": "interleaved"}, "reasoning_history")]
NO_REASONING = [{"reasoning_effort": "none"}, {"reasoning_effort": False}, {"thinking": {"type": "disabled"}},
                {"reasoning_history": "disabled"}]


def test_a_model_that_does_not_reason_refuses_reasoning_and_accepts_none(shared_tiny_client):
    for fields, param in NOT_REASONING:
        response = shared_tiny_client.post(URL, json=body(max_completion_tokens=1, **fields))
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and "does not reason" in error["message"]
    for fields in NO_REASONING:
        reply = chat(shared_tiny_client, max_completion_tokens=1, **fields)
        assert "reasoning_content" not in reply["choices"][0]["message"]
        assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
