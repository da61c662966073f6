"""POST /v1/responses (not streamed) on the tiny-model app.

Expectations come from outside the code under test: the tokenizer's own rendering of the
equivalent chat messages, engine requests observed on their way in, and the engine run
directly on the same prompt.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from api_helpers import rendered_ids
from chat_helpers import engine_outputs
from responses_helpers import MODEL_ID, create, greedy_text, output_text

from engine.host.request import Request, SamplingParams, StopCriteria
from generated.flint import Response


def test_a_text_input_is_one_user_message(client, engine_requests, smollm2_tokenizer):
    response = create(client, input="What is 6 x 7?")
    expected = rendered_ids(smollm2_tokenizer, [{"role": "user", "content": "What is 6 x 7?"}])
    assert [r.prompt_token_ids for r in engine_requests] == [expected]
    Response.model_validate(response)
    assert response["id"].startswith("resp_") and response["object"] == "response"
    assert response["model"] == MODEL_ID and response["error"] is None
    [message] = response["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["id"].startswith("msg_")
    assert output_text(response) == greedy_text(client, expected, 6)
    usage = response["usage"]
    assert usage["input_tokens"] == len(expected)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}
    assert usage["input_tokens_details"]["cached_tokens"] >= 0


def test_input_items_render_through_the_chat_template(client, engine_requests, smollm2_tokenizer):
    items = [
        {"role": "system", "content": "You are terse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is"},
                                                         {"type": "input_text", "text": "6 x 7?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me see."},
                                          {"type": "refusal", "refusal": "I cannot count."}]},
        {"type": "message", "id": "msg_earlier", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "It is 42.", "annotations": []}]},
        {"role": "developer", "content": "Answer in words."},
        {"role": "user", "content": "So?"},
    ]
    # Parts join with newlines; SmolLM2's template does not know `developer`: it reads system.
    equivalent = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is\n6 x 7?"},
        {"role": "assistant", "content": "Let me see.\nI cannot count."},
        {"role": "assistant", "content": "It is 42."},
        {"role": "system", "content": "Answer in words."},
        {"role": "user", "content": "So?"},
    ]
    response = create(client, input=items)
    expected = rendered_ids(smollm2_tokenizer, equivalent)
    assert [r.prompt_token_ids for r in engine_requests] == [expected]
    assert response["usage"]["input_tokens"] == len(expected)
    assert output_text(response) == greedy_text(client, expected, 6)


def test_instructions_become_the_system_message(client, engine_requests, smollm2_tokenizer):
    response = create(client, instructions="Be brief.", input="Hello")
    expected = rendered_ids(smollm2_tokenizer, [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Hello"}])
    assert [r.prompt_token_ids for r in engine_requests] == [expected]
    assert response["instructions"] == "Be brief."


def test_function_call_output_renders_as_a_tool_message(client, engine_requests, smollm2_tokenizer):
    items = [{"role": "user", "content": "What is 6 x 7?"},
             {"type": "function_call_output", "call_id": "call_1", "output": "42"},
             {"type": "function_call_output", "call_id": "call_2",
              "output": [{"type": "input_text", "text": "forty"}, {"type": "input_text", "text": "two"}]}]
    create(client, input=items)
    # SmolLM2's template renders no tools: results are user turns in Flint's default format.
    expected = rendered_ids(smollm2_tokenizer, [{"role": "user", "content": "What is 6 x 7?"},
                                                {"role": "user", "content": "<tool_response>\n42\n</tool_response>"},
                                                {"role": "user",
                                                 "content": "<tool_response>\nforty\ntwo\n</tool_response>"}])
    assert [r.prompt_token_ids for r in engine_requests] == [expected]


def test_max_output_tokens_makes_the_response_incomplete(client, engine_requests):
    response = create(client, max_output_tokens=3)
    assert engine_requests[0].stop.max_tokens == 3
    assert response["usage"]["output_tokens"] == 3
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["max_output_tokens"] == 3


def test_a_finished_answer_is_completed(client, monkeypatch, smollm2_tokenizer):
    # Make the greedy answer's first token a stop token: the model ends its answer there.
    prompt = rendered_ids(smollm2_tokenizer, [{"role": "user", "content": "Say hi"}])
    outputs = engine_outputs(client, Request("first", prompt, SamplingParams(temperature=0), StopCriteria(max_tokens=1)))
    [first_token] = [token for out in outputs for token in out.new_token_ids]
    engine = client.app.state.server.running_engine
    original = engine.generate

    def ending_after_its_first_token(request: Request):
        stop = replace(request.stop, token_ids=(first_token,))
        return original(Request(request.request_id, request.prompt_token_ids, request.sampling, stop))

    monkeypatch.setattr(engine, "generate", ending_after_its_first_token)
    response = create(client, input="Say hi", max_output_tokens=20)
    assert response["status"] == "completed" and response["incomplete_details"] is None
    assert response["output"][0]["status"] == "completed"
    assert response["usage"]["output_tokens"] == 1


def test_sampling_fields_reach_the_engine(client, engine_requests):
    create(client, temperature=0.5, top_p=0.9)
    sampling = engine_requests[0].sampling
    assert (sampling.temperature, sampling.top_p) == (0.5, 0.9)


def test_logprobs_match_the_engine(client, engine_requests, smollm2_tokenizer):
    response = create(client, include=["message.output_text.logprobs"], top_logprobs=2, max_output_tokens=4)
    [part] = response["output"][0]["content"]
    prompt = engine_requests[0].prompt_token_ids
    sampling = SamplingParams(temperature=0, logprobs=2)
    outputs = engine_outputs(client, Request("reference", prompt, sampling, StopCriteria(max_tokens=4)))
    reference = [logprob for out in outputs for logprob in out.logprobs]
    assert len(part["logprobs"]) == len(reference) == 4
    for entry, expected in zip(part["logprobs"], reference):
        assert bytes(entry["bytes"]) == smollm2_tokenizer.token_bytes(expected.token_id)
        assert entry["logprob"] == pytest.approx(expected.logprob, abs=1e-4)
        assert [bytes(top["bytes"]) for top in entry["top_logprobs"]] == \
            [smollm2_tokenizer.token_bytes(token) for token, _ in expected.top]
    assert "logprobs" not in create(client)["output"][0]["content"][0]


def test_the_response_echoes_its_settings(client, caplog):
    settings = {"temperature": 0.7, "top_p": 0.8, "metadata": {"topic": "greeting"},
                "tool_choice": "none", "text": {"format": {"type": "text"}, "verbosity": "medium"},
                "reasoning": {"effort": "none"}, "user": "ann", "safety_identifier": "hash-1",
                "prompt_cache_key": "greetings"}
    with caplog.at_level(logging.INFO, logger="flint"):
        response = create(client, **settings)
    for name, value in settings.items():
        if name != "reasoning":
            assert response[name] == value, name
    assert response["reasoning"]["effort"] == "none"
    assert response["tools"] == [] and response["parallel_tool_calls"] is True
    assert response["truncation"] == "disabled" and response["store"] is True
    assert "ann" in caplog.text and "hash-1" in caplog.text and "greetings" in caplog.text
    defaults = create(client, temperature=None)
    assert (defaults["temperature"], defaults["tool_choice"], defaults["metadata"]) == (1, "auto", {})
