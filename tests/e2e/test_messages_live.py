"""Anthropic Messages on a live server with the embedded SmolLM2, driven by the `anthropic` SDK."""

from __future__ import annotations

import anthropic
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
SYSTEM = "You are a concise assistant."
MESSAGES = [{"role": "user", "content": "Name a colour of the sky."}]


@pytest.fixture(scope="module")
def sdk(live_server) -> anthropic.Anthropic:
    # The SDK adds /v1/messages to the base URL itself. A timeout of our own spares the SDK
    # its estimate from max_tokens, which cannot be made when max_tokens is left out.
    return anthropic.Anthropic(base_url=live_server, api_key="not-needed", max_retries=0, timeout=300)


# Recent SDKs dropped the sampling arguments from create() and stream() (newer Claude models
# fix them), so greedy decoding is asked for in the body directly.
GREEDY = {"temperature": 0}


def create(sdk, **fields):
    return sdk.messages.create(model=MODEL_ID, system=SYSTEM, messages=MESSAGES, extra_body=GREEDY,
                               **{"max_tokens": 10, **fields})


def test_a_message_counts_the_rendered_prompt(sdk, smollm2_tokenizer):
    reply = create(sdk)
    conversation = [{"role": "system", "content": SYSTEM}, *MESSAGES]
    prompt = smollm2_tokenizer.encode(smollm2_tokenizer.render_chat(conversation), add_special_tokens=False)
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == len(prompt)
    assert reply.id.startswith("msg_") and reply.role == "assistant" and reply.model == MODEL_ID
    [block] = reply.content
    assert block.type == "text" and block.text
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.stop_sequence is None
    assert 0 < reply.usage.output_tokens <= 10


def test_the_stream_assembles_the_same_message(sdk):
    whole = create(sdk)
    with sdk.messages.stream(model=MODEL_ID, system=SYSTEM, messages=MESSAGES, extra_body=GREEDY,
                             max_tokens=10) as events:
        text = "".join(events.text_stream)
        final = events.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)
    assert final.id.startswith("msg_") and final.id != whole.id


def test_stop_sequences_give_stop_reason_stop_sequence(sdk):
    whole = create(sdk, max_tokens=12).content[0].text
    stop = whole[len(whole) // 2: len(whole) // 2 + 2]
    cut = create(sdk, max_tokens=12, stop_sequences=[stop])
    assert cut.content[0].text == whole[: whole.find(stop)]
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", stop)


def test_a_missing_max_tokens_is_an_invalid_request_error(sdk):
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.messages.create(model=MODEL_ID, messages=MESSAGES, max_tokens=anthropic.NOT_GIVEN)
    assert refused.value.status_code == 400
    body = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("max_tokens")
