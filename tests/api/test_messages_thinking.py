"""Thinking in the Messages API, on the tiny Qwen3-style app: `thinking` blocks with a
signature this server can check, `thinking_delta` and `signature_delta` events the anthropic
SDK assembles, the budget, and thinking given back as history."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest
from messages_helpers import URL, AppTransport, anthropic_error, named_events
from reasoning_helpers import CALL, MODEL_ID, posted, rendered

from api.messages.thinking import signature, signing_key
from engine.text.reasoning import DEFAULT_BUDGET_END
from generated.flint import MessageStreamEvent

QUESTION = [{"role": "user", "content": "What is 6 x 7?"}]


@pytest.fixture(scope="module")
def client(qwen3_client):
    return qwen3_client


@pytest.fixture(scope="module")
def key(client) -> bytes:
    return signing_key(client.app.state.server.settings.data_dir)


def body(**fields) -> dict:
    return {"model": MODEL_ID, "messages": QUESTION, "max_tokens": 12, "temperature": 0, **fields}


def create(client, **fields) -> dict:
    return posted(client, URL, body(**fields))


def error(client, **fields) -> dict:
    return anthropic_error(client.post(URL, json=body(**fields)), 400)


def test_a_thinking_budget_ends_the_thinking_block(client, key):
    reply = create(client, thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=1040)
    thinking, text = reply["content"]
    assert thinking["type"] == "thinking" and text["type"] == "text"
    assert thinking["thinking"].endswith(DEFAULT_BUDGET_END.strip("\n"))
    assert thinking["signature"] == signature(key, thinking["thinking"])
    assert reply["usage"]["output_tokens"] == 1040 and reply["stop_reason"] == "max_tokens"
    assert error(client, thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=1024)["message"].startswith(
        "`thinking.budget_tokens`")


def test_the_sdk_assembles_the_thinking_and_text_blocks_of_a_stream(client, key):
    adaptive = {"type": "adaptive"}  # no budget: the model thinks until max_tokens here
    whole = create(client, thinking=adaptive, max_tokens=12)
    events = named_events(client.post(URL, json=body(thinking=adaptive, max_tokens=12, stream=True)).text)
    for _, data in events:
        MessageStreamEvent.model_validate(data)
    starts = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    deltas = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]
    assert starts == ["thinking", "text"] and deltas[-1] == "signature_delta"
    assert set(deltas[:-1]) == {"thinking_delta"}
    http_client = httpx2.Client(transport=AppTransport(client))
    with anthropic.Anthropic(base_url=str(client.base_url), api_key="not-needed", http_client=http_client,
                             max_retries=0) as sdk:
        with sdk.messages.stream(model=MODEL_ID, messages=QUESTION, max_tokens=12, thinking=adaptive,
                                 extra_body={"temperature": 0}) as stream:
            message = stream.get_final_message()
    thinking, text = message.content
    assert (thinking.type, thinking.thinking, thinking.signature) == ("thinking", whole["content"][0]["thinking"],
                                                                      signature(key, whole["content"][0]["thinking"]))
    assert (text.type, text.text) == ("text", whole["content"][1]["text"])


def tool_turns(thinking: dict) -> list[dict]:
    """The question, an answer that thought and called a tool, and the tool's result."""
    use = {"type": "tool_use", "id": CALL["id"], "name": CALL["function"]["name"], "input": {"by": 7}}
    return [*QUESTION, {"role": "assistant", "content": [thinking, use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL["id"], "content": "42"}]}]


def test_thinking_blocks_come_back_as_history_only_when_their_signature_holds(client, key, tokenizer,
                                                                             engine_requests):
    thought = "I should call multiply."
    block = {"type": "thinking", "thinking": thought, "signature": signature(key, thought)}
    create(client, messages=tool_turns(block), max_tokens=1)
    call = {**CALL, "function": {**CALL["function"], "arguments": json.dumps({"by": 7})}}
    expected = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [call], "reasoning_content": thought},
                {"role": "tool", "tool_call_id": CALL["id"], "content": "42"}]
    assert engine_requests[-1].prompt_token_ids == rendered(tokenizer, expected)
    assert thought in tokenizer.decode(engine_requests[-1].prompt_token_ids)
    tampered = error(client, messages=tool_turns({**block, "thinking": "I should lie."}))
    assert tampered["message"].startswith("`messages.[1].content.[0].signature`")
    misplaced = [{"role": "user", "content": [block]}]
    assert "assistant" in error(client, messages=misplaced)["message"]
    prefill = [*QUESTION, {"role": "assistant", "content": "The answer is"}]
    assert error(client, messages=prefill, thinking={"type": "adaptive"})["message"].startswith("`thinking`")
    redacted = tool_turns({"type": "redacted_thinking", "data": "x"})
    assert "redacted_thinking" in error(client, messages=redacted)["message"]


def test_disabled_thinking_is_the_template_switch_and_counts_the_same(client, tokenizer, engine_requests):
    reply = create(client, thinking={"type": "disabled"}, max_tokens=4)
    assert [block["type"] for block in reply["content"]] == ["text"]
    assert engine_requests[-1].prompt_token_ids == rendered(tokenizer, QUESTION, enable_thinking=False)
    counted = client.post(f"{URL}/count_tokens", json={"model": MODEL_ID, "messages": QUESTION,
                                                       "thinking": {"type": "disabled"}})
    assert counted.json() == {"input_tokens": len(engine_requests[-1].prompt_token_ids)}
    assert error(client, thinking={"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
                 max_tokens=2048)["message"].startswith("`thinking.display`")


def test_a_model_that_does_not_reason_refuses_thinking(shared_tiny_client):
    for thinking in ({"type": "adaptive"}, {"type": "enabled", "budget_tokens": 1024}):
        refused = anthropic_error(shared_tiny_client.post(URL, json=body(thinking=thinking, max_tokens=2048)), 400)
        assert "does not reason" in refused["message"]
    answered = shared_tiny_client.post(URL, json=body(thinking={"type": "disabled"}))
    assert answered.status_code == 200 and answered.json()["content"][0]["type"] == "text"
