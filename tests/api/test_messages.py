"""POST /v1/messages (not streamed) on the tiny-model app.

Expectations come from outside the code under test: the tokenizer's own rendering of the
equivalent chat messages, the engine requests observed on their way in, and the engine
run directly on the same prompt.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from api_helpers import rendered_ids
from chat_helpers import engine_outputs
from messages_helpers import MODEL_ID, USER_HI, anthropic_error, body, create

from api.core.errors import ApiError
from api.core.generation import ChoiceResult
from api.core.usage import Usage
from api.messages.plan import blocks_text
from api.messages.render import MessageIdentity, message
from engine.host.request import Request, SamplingParams, StopCriteria
from generated.flint import ImageBlockParam, Message, TextBlockParam


def test_system_and_text_blocks_render_through_the_chat_template(client, engine_requests, smollm2_tokenizer):
    blocks = [{"type": "text", "text": "What is"}, {"type": "text", "text": "6 x 7?"}]
    conversation = [{"role": "user", "content": "Hello."},
                    {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]},
                    {"role": "user", "content": blocks}]
    as_blocks = create(client, system=[{"type": "text", "text": "Be"}, {"type": "text", "text": "terse."}],
                       messages=conversation)
    as_string = create(client, system="Be\nterse.", messages=conversation)
    create(client, system="", messages=USER_HI)  # an empty system prompt adds no system turn
    expected = rendered_ids(smollm2_tokenizer, [
        {"role": "system", "content": "Be\nterse."}, {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "What is\n6 x 7?"}])
    assert [r.prompt_token_ids for r in engine_requests] == [
        expected, expected, rendered_ids(smollm2_tokenizer, USER_HI)]
    assert as_blocks["content"] == as_string["content"]

    reply = Message.model_validate(as_blocks)
    assert reply.id.startswith("msg_") and reply.type == "message" and reply.role == "assistant"
    assert reply.model == MODEL_ID and [block.root.type for block in reply.content] == ["text"]
    usage = reply.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == len(expected)
    assert usage.cache_creation_input_tokens == 0 and usage.service_tier == "standard"


def test_max_tokens_ends_the_reply(client, engine_requests):
    reply = create(client, max_tokens=3)
    [request] = engine_requests
    assert request.stop.max_tokens == 3
    direct = engine_outputs(client, Request("direct-max-tokens", request.prompt_token_ids,
                                            SamplingParams(temperature=0), StopCriteria(max_tokens=3)))
    assert reply["content"] == [{"type": "text", "text": "".join(o.text for o in direct)}]
    assert (reply["stop_reason"], reply["stop_sequence"]) == ("max_tokens", None)
    assert reply["usage"]["output_tokens"] == direct[-1].num_output_tokens == 3


def test_stop_sequences_end_the_reply_and_are_reported(client):
    whole = create(client, max_tokens=10)["content"][0]["text"]
    assert len(whole) >= 4, "the tiny model's reply is too short to cut"
    stop = whole[len(whole) // 2: len(whole) // 2 + 2]
    cut = create(client, max_tokens=10, stop_sequences=["never-generated-marker", stop])
    assert cut["content"][0]["text"] == whole[: whole.find(stop)]
    assert (cut["stop_reason"], cut["stop_sequence"]) == ("stop_sequence", stop)
    error = anthropic_error(client.post("/v1/messages", json=body(stop_sequences=[""])), 400)
    assert "stop_sequences" in error["message"]


def test_an_end_of_turn_token_is_end_turn():
    """The engine's own stop (an EOS token) is Anthropic's end_turn; the tiny model rarely
    emits one, so the conversion is checked on a finished result directly."""
    usage = Usage(prompt_tokens={0: 9}, cached_tokens={0: 0}, completion_tokens={0: 2})
    result = ChoiceResult(index=0, prompt_index=0, text="Hi.", finish_reason="stop")
    reply = message(MessageIdentity(id="msg_x", model=MODEL_ID), result, usage)
    assert (reply.stop_reason, reply.stop_sequence) == ("end_turn", None)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (9, 2)
    with pytest.raises(ApiError) as broken:  # a Message cannot say its generation broke off
        message(MessageIdentity(id="msg_y", model=MODEL_ID), replace(result, finish_reason="error"), usage)
    assert broken.value.status_code == 503 and broken.value.code == "cut_off"


def test_sampling_fields_reach_the_engine(client, engine_requests, smollm2_tokenizer):
    create(client, temperature=0.5, top_p=0.9, top_k=5)
    default = body()
    del default["temperature"]
    assert client.post("/v1/messages", json=default).status_code == 200
    tuned, untuned = (request.sampling for request in engine_requests)
    assert (tuned.temperature, tuned.top_p, tuned.top_k, engine_requests[0].stop.max_tokens) == (0.5, 0.9, 5, 6)
    assert (untuned.temperature, untuned.top_p, untuned.top_k) == (1.0, 1.0, 0)  # Anthropic's default: 1
    too_many = anthropic_error(client.post("/v1/messages", json=body(top_k=smollm2_tokenizer.vocab_size + 1)), 400)
    assert too_many["type"] == "invalid_request_error" and "top_k" in too_many["message"]


def test_user_id_is_logged(client, caplog):
    with caplog.at_level(logging.INFO, logger="flint"):
        create(client, metadata={"user_id": "user-8421"})
    assert any("user-8421" in record.getMessage() for record in caplog.records)


def test_a_final_assistant_message_is_a_prefill(client, engine_requests, smollm2_tokenizer):
    reply = create(client, messages=[*USER_HI, {"role": "assistant", "content": "Well, hi"}])
    [request] = engine_requests
    assert request.prompt_token_ids == rendered_ids(smollm2_tokenizer, USER_HI, prefill="Well, hi")
    direct = engine_outputs(client, Request("direct-prefill", request.prompt_token_ids,
                                            SamplingParams(temperature=0), StopCriteria(max_tokens=6)))
    assert reply["content"][0]["text"] == "".join(o.text for o in direct)  # the prefill is not repeated
    trailing = client.post("/v1/messages", json=body(messages=[*USER_HI, {"role": "assistant", "content": "Hi "}]))
    assert "whitespace" in anthropic_error(trailing, 400)["message"]


def test_cache_control_breakpoints_are_served_by_the_prefix_cache(client, smollm2_tokenizer):
    # A system prompt of several KV pages (16 tokens each), marked as a cache breakpoint.
    system = [{"type": "text", "text": "You answer questions about the sea. " * 12,
               "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
    first = create(client, system=system)["usage"]
    second = create(client, system=system)["usage"]
    total = first["input_tokens"] + first["cache_read_input_tokens"]
    assert second["input_tokens"] + second["cache_read_input_tokens"] == total
    assert second["cache_read_input_tokens"] >= 3 * 16 and second["input_tokens"] < first["input_tokens"]


def test_only_text_blocks_reach_the_template():
    """The registry refuses other blocks first (tests/api/test_messages_errors.py); this guard
    keeps a block type added to the spec from reaching the template unread."""
    image = ImageBlockParam.model_validate({"type": "image", "source": {"type": "url", "url": "http://x/y.png"}})
    with pytest.raises(ApiError) as refused:
        blocks_text([{"type": "text", "text": "Look:"}, image])
    assert refused.value.status_code == 400
    assert blocks_text([TextBlockParam(type="text", text="a"), TextBlockParam(type="text", text="b")]) == "a\nb"
