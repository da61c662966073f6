"""POST /v1/chat/completions (not streamed) on the tiny-model app.

Expectations come from outside the code under test: the tokenizer's own rendering of the
equivalent messages, engine requests observed on their way in, and the engine run directly.
"""

from __future__ import annotations

import logging

import pytest
from api_helpers import rendered_ids
from chat_helpers import MODEL_ID, URL, USER_HI, body, chat, engine_outputs

from api.core.openai import token_entry
from engine.host.request import Request, SamplingParams, StopCriteria
from generated.openai_chat_completions import ChatCompletion


def test_every_role_renders_through_the_chat_template(client, engine_requests, smollm2_tokenizer):
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "system", "content": "You are terse.", "name": "ops"},
        {"role": "user", "content": "What is 6 x 7?", "name": "ann"},
        {"role": "assistant", "content": "Let me look it up."},
        {"role": "tool", "content": "42", "tool_call_id": "call_1"},
        {"role": "function", "content": "42", "name": "multiply"},
        {"role": "user", "content": "So?"},
    ]
    # SmolLM2's template knows neither developer nor function: they arrive as system and tool,
    # and a template that renders no tools gets tool results as user turns in Flint's default
    # format (api/core/tool_prompt.py).
    equivalent = [{**m, "role": {"developer": "system"}.get(m["role"], m["role"])} for m in messages]
    equivalent[4:6] = [{"role": "user", "content": "<tool_response>\n42\n</tool_response>"}] * 2
    reply = ChatCompletion.model_validate(chat(client, messages=messages))
    expected = rendered_ids(smollm2_tokenizer, equivalent)
    assert [r.prompt_token_ids for r in engine_requests] == [expected]
    assert reply.usage.prompt_tokens == len(expected)
    assert reply.model == MODEL_ID and reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.refusal is None
    assert (choice.finish_reason, reply.usage.completion_tokens) == ("length", 6)


def test_text_parts_equal_string_content(client, engine_requests, smollm2_tokenizer):
    parts = [{"type": "text", "text": "Say"}, {"type": "text", "text": "hi"}]
    one_part = chat(client, messages=[{"role": "user", "content": [{"type": "text", "text": "Say hi"}]}])
    as_string = chat(client, messages=USER_HI)
    chat(client, messages=[{"role": "user", "content": parts}])
    first, second, joined = (r.prompt_token_ids for r in engine_requests)
    assert first == second == rendered_ids(smollm2_tokenizer, USER_HI)
    assert joined == rendered_ids(smollm2_tokenizer, [{"role": "user", "content": "Say\nhi"}])
    assert one_part["choices"][0]["message"] == as_string["choices"][0]["message"]


def test_assistant_refusals_render_as_its_text(client, engine_requests, smollm2_tokenizer):
    chat(client, messages=[*USER_HI, {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
                           {"role": "assistant", "content": None, "refusal": "Nope."}, *USER_HI])
    expected = [*USER_HI, {"role": "assistant", "content": "No."}, {"role": "assistant", "content": "Nope."},
                *USER_HI]
    assert engine_requests[0].prompt_token_ids == rendered_ids(smollm2_tokenizer, expected)


def test_n_choices_with_a_seed_differ_and_repeat(client):
    fields = {"n": 3, "seed": 11, "temperature": 1.0, "max_completion_tokens": 8}
    texts = [c["message"]["content"] for c in chat(client, **fields)["choices"]]
    again = [c["message"]["content"] for c in chat(client, **fields)["choices"]]
    single = chat(client, **{**fields, "n": 1})["choices"][0]["message"]["content"]
    assert texts == again
    assert len(set(texts)) == 3
    assert texts[0] == single  # choice 0 draws with the seed itself
    assert chat(client, **{**fields, "seed": 12})["choices"][0]["message"]["content"] != texts[0]


def test_stop_strings_cut_the_reply(client):
    text = chat(client, max_completion_tokens=12)["choices"][0]["message"]["content"]
    stop = text[len(text) // 2: len(text) // 2 + 3]
    cut = chat(client, max_completion_tokens=12, stop=[stop, "never appears \u2603"])["choices"][0]
    assert cut["message"]["content"] == text[: text.find(stop)]
    assert cut["finish_reason"] == "stop"
    assert chat(client, max_completion_tokens=12, stop=stop)["choices"][0] == cut


def test_max_completion_tokens_limits_the_reply(client):
    reply = chat(client, max_completion_tokens=3)
    assert reply["usage"]["completion_tokens"] == 3
    assert reply["choices"][0]["finish_reason"] == "length"


def test_deprecated_max_tokens_limits_the_reply(client):
    body = {"max_tokens": 2}
    reply = client.post("/v1/chat/completions", json={"model": MODEL_ID, "messages": USER_HI, **body}).json()
    assert reply["usage"]["completion_tokens"] == 2
    assert reply["choices"][0]["finish_reason"] == "length"


def test_sampling_fields_reach_the_engine(client, engine_requests):
    chat(client, temperature=0.5, top_p=0.9, frequency_penalty=0.3, presence_penalty=-0.2, seed=5)
    sampling = engine_requests[0].sampling
    assert (sampling.temperature, sampling.top_p) == (0.5, 0.9)
    assert (sampling.frequency_penalty, sampling.presence_penalty, sampling.seed) == (0.3, -0.2, 5)


def test_fireworks_sampling_fields_reach_the_engine(client, engine_requests):
    chat(client, top_k=5, min_p=0.1, typical_p=0.9, repetition_penalty=1.1, mirostat_target=3.0,
         mirostat_lr=0.2, ignore_eos=True)
    sampling = engine_requests[0].sampling
    assert (sampling.top_k, sampling.min_p, sampling.typical_p, sampling.repetition_penalty) == (5, 0.1, 0.9, 1.1)
    assert (sampling.mirostat_target, sampling.mirostat_lr, engine_requests[0].stop.ignore_eos) == (3.0, 0.2, True)


def test_context_length_exceeded_caps_or_refuses(client):
    # About 248 prompt tokens: the tiny engine's 256-token window leaves room for a few more.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "word " * 230}]
    for behaviour in ({}, {"context_length_exceeded_behavior": "truncate"}):
        reply = chat(client, messages=messages, max_completion_tokens=50, **behaviour)
        room = 256 - reply["usage"]["prompt_tokens"]
        assert 0 < room < 50 and reply["usage"]["completion_tokens"] == room
        assert reply["choices"][0]["finish_reason"] == "length"
    refused = client.post(URL, json=body(messages=messages, max_completion_tokens=50,
                                         context_length_exceeded_behavior="error"))
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "context_length_exceeded_behavior"
    assert chat(client, messages=messages, max_completion_tokens=2,
                context_length_exceeded_behavior="error")["usage"]["completion_tokens"] == 2


def test_logit_bias_forces_a_token(client, smollm2_tokenizer):
    token = smollm2_tokenizer.encode(" maple", add_special_tokens=False)
    assert len(token) == 1
    reply = chat(client, logit_bias={str(token[0]): 100}, max_completion_tokens=4)
    assert reply["choices"][0]["message"]["content"] == smollm2_tokenizer.decode(token * 4)


def test_logprobs_content_matches_the_engine(client, engine_requests, smollm2_tokenizer):
    reply = chat(client, logprobs=True, top_logprobs=3, max_completion_tokens=5)
    content = reply["choices"][0]["logprobs"]["content"]
    prompt = engine_requests[0].prompt_token_ids
    request = Request("reference", prompt, SamplingParams(temperature=0, logprobs=3), StopCriteria(max_tokens=5))
    reference = [lp for out in engine_outputs(client, request) for lp in out.logprobs]
    assert len(content) == len(reference) == 5
    for entry, expected in zip(content, reference):
        assert bytes(entry["bytes"]) == smollm2_tokenizer.token_bytes(expected.token_id)
        assert entry["logprob"] == pytest.approx(expected.logprob, abs=1e-4)
        assert [bytes(top["bytes"]) for top in entry["top_logprobs"]] == \
            [smollm2_tokenizer.token_bytes(token) for token, _ in expected.top]
        assert [top["logprob"] for top in entry["top_logprobs"]] == \
            pytest.approx([value for _, value in expected.top], abs=1e-4)
    assert b"".join(bytes(entry["bytes"]) for entry in content).decode() == \
        reply["choices"][0]["message"]["content"]
    assert chat(client)["choices"][0]["logprobs"] is None


def test_usage_reports_cached_prompt_tokens(client):
    # A system message of its own keeps the prompt's first pages out of the cache at first.
    messages = [{"role": "system", "content": "cache me " * 20 + "please"}, *USER_HI]
    first, second = (chat(client, messages=messages)["usage"] for _ in range(2))
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert 0 < second["prompt_tokens_details"]["cached_tokens"] < second["prompt_tokens"]
    assert second["total_tokens"] == second["prompt_tokens"] + second["completion_tokens"]


def test_caller_fields_are_logged(client, caplog):
    with caplog.at_level(logging.INFO, logger="flint"):
        chat(client, user="user-7", safety_identifier="hash-9", prompt_cache_key="key-3",
             metadata={"team": "blue"})
    logged = " ".join(record.getMessage() for record in caplog.records)
    for value in ("user-7", "hash-9", "key-3", "blue"):
        assert value in logged


def test_a_token_holding_part_of_a_character_is_shown_as_bytes(smollm2_tokenizer):
    ids = smollm2_tokenizer.encode("你", add_special_tokens=False)
    pieces = [smollm2_tokenizer.token_bytes(i) for i in ids]
    assert len(ids) > 1 and b"".join(pieces) == "你".encode()  # one character over several tokens
    entry = token_entry(smollm2_tokenizer, ids[0], -1.5)
    assert entry.bytes == list(pieces[0])
    assert entry.token == "bytes:" + "".join(f"\\x{byte:02x}" for byte in pieces[0])


def test_the_fireworks_base_url_serves_chat_too(client):
    fields = {"model": MODEL_ID, "messages": USER_HI, "temperature": 0, "max_completion_tokens": 3}
    reply = client.post("/inference/v1/chat/completions", json=fields).json()
    assert reply["choices"][0]["message"] == chat(client, max_completion_tokens=3)["choices"][0]["message"]
