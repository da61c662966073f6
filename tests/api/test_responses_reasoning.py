"""Reasoning in the Responses API, on the tiny Qwen3-style app: `reasoning.effort` sets the
thinking budget, the thinking is a `reasoning` output item (its `response.reasoning_text`
events when streamed), usage counts its tokens, and reasoning items given back as input
reach the template as the reasoning of the answer they precede."""

from __future__ import annotations

import pytest
from reasoning_helpers import CALL, MODEL_ID, posted, rendered
from responses_helpers import URL, named_events

from api.core.reasoning import EFFORT_BUDGETS
from engine.text.reasoning import DEFAULT_BUDGET_END
from generated.flint import ResponseStreamEvent

EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh"]  # OpenAI's levels


@pytest.fixture(scope="module")
def client(qwen3_client):
    return qwen3_client


def body(**fields) -> dict:
    return {"model": MODEL_ID, "input": "What is 6 x 7?", "temperature": 0, "max_output_tokens": 8, **fields}


def create(client, **fields) -> dict:
    return posted(client, URL, body(**fields))


def error_param(client, **fields) -> str:
    return posted(client, URL, body(**fields), status=400)["error"]["param"]


@pytest.mark.parametrize("effort", EFFORTS)
def test_each_effort_level_sets_the_budget(client, engine_requests, tokenizer, effort):
    response = create(client, reasoning={"effort": effort}, max_output_tokens=1)
    [request] = engine_requests
    assert request.reasoning.budget == EFFORT_BUDGETS[effort] and request.reasoning.opens == (effort != "none")
    assert request.prompt_token_ids == rendered(tokenizer, [{"role": "user", "content": "What is 6 x 7?"}],
                                                enable_thinking=effort != "none")
    assert response["reasoning"]["effort"] == effort


def test_reasoning_effort_sets_the_budget_and_the_answer_holds_a_reasoning_item(client):
    budget = EFFORT_BUDGETS["minimal"]
    response = create(client, reasoning={"effort": "minimal"}, max_output_tokens=budget + 8)
    reasoning, message = response["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_") and reasoning["summary"] == []
    [part] = reasoning["content"]
    # The budget ran out: its last tokens are the built-in phrase, then the end tag.
    assert part["type"] == "reasoning_text" and part["text"].endswith(DEFAULT_BUDGET_END.strip("\n"))
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == budget + 2
    assert message["type"] == "message" and response["usage"]["output_tokens"] == budget + 8
    # Stored, and carried into the next turn, where Qwen3's template drops earlier reasoning.
    stored = client.get(f"{URL}/{response['id']}").json()
    assert stored["output"] == response["output"]
    follow_up = create(client, input="And 7 x 6?", previous_response_id=response["id"], max_output_tokens=1,
                       reasoning={"effort": "none"})
    assert follow_up["status"] == "incomplete"


def test_reasoning_streams_as_its_own_item_before_the_message(client):
    whole = create(client, reasoning={"effort": "minimal"}, max_output_tokens=520)
    response = client.post(URL, json=body(reasoning={"effort": "minimal"}, max_output_tokens=520, stream=True))
    events = named_events(response.text)
    for event in events:
        ResponseStreamEvent.model_validate(event)
    types = [event["type"] for event in events]
    first_text = types.index("response.output_text.delta") if "response.output_text.delta" in types else len(types)
    assert types[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert events[2]["item"]["type"] == "reasoning" and events[2]["output_index"] == 0
    done = types.index("response.reasoning_text.done")
    assert set(types[4:done]) == {"response.reasoning_text.delta"} and done < first_text
    assert types[done:done + 3] == ["response.reasoning_text.done", "response.content_part.done",
                                    "response.output_item.done"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert text == events[done]["text"] == whole["output"][0]["content"][0]["text"]
    message = next(e for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == "message")
    assert message["output_index"] == 1
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][1]["content"] == whole["output"][1]["content"]
    assert final["usage"] == whole["usage"]


def test_no_reasoning_item_when_the_model_does_not_think(client):
    response = create(client, reasoning={"effort": "none"})
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


def reasoning_item(**fields) -> dict:
    return {"type": "reasoning", "id": "rs_1", "summary": [], **fields}


def test_reasoning_items_become_the_reasoning_of_the_next_answer(client, engine_requests, tokenizer):
    call = {"type": "function_call", "call_id": CALL["id"], "name": CALL["function"]["name"],
            "arguments": CALL["function"]["arguments"]}
    result = {"type": "function_call_output", "call_id": CALL["id"], "output": "42"}
    question = {"role": "user", "content": "What is 6 x 7?"}
    for item, text in ((reasoning_item(content=[{"type": "reasoning_text", "text": "I should call it."}]),
                        "I should call it."),
                       (reasoning_item(summary=[{"type": "summary_text", "text": "Call it."}]), "Call it.")):
        create(client, input=[question, item, call, result], max_output_tokens=1)
        assistant = {"role": "assistant", "content": "", "tool_calls": [CALL], "reasoning_content": text}
        expected = [question, assistant, {"role": "tool", "tool_call_id": CALL["id"], "content": "42"}]
        assert engine_requests[-1].prompt_token_ids == rendered(tokenizer, expected)
        assert text in tokenizer.decode(engine_requests[-1].prompt_token_ids)
    assert error_param(client, input=[question, reasoning_item()]) == "input.[1]"
    assert error_param(client, input=[question, reasoning_item(), question]) == "input.[1]"
    assert error_param(client, input=[question, reasoning_item(encrypted_content="x"), call, result]) == \
        "input.[1].encrypted_content"
    assert error_param(client, reasoning={"summary": "auto"}) == "reasoning.summary"


def test_a_model_that_does_not_reason_refuses_an_effort(shared_tiny_client):
    response = shared_tiny_client.post(URL, json=body(reasoning={"effort": "low"}))
    assert response.status_code == 400 and response.json()["error"]["param"] == "reasoning.effort"
    assert "does not reason" in response.json()["error"]["message"]
    answered = create(shared_tiny_client, reasoning={"effort": "none"})
    assert answered["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
