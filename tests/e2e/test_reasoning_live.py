"""Reasoning controls on a live server with the embedded SmolLM2, which does not reason:
every dialect refuses what asks for reasoning with a 400 that says so, and answers what asks
for none, through the real `openai` and `anthropic` SDKs."""

from __future__ import annotations

import anthropic
import openai
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "user", "content": "Name a colour of the sky."}]


@pytest.fixture(scope="module")
def claude(live_server):
    with anthropic.Anthropic(base_url=live_server, api_key="not-needed", max_retries=0, timeout=300) as client:
        yield client


def test_asking_a_model_that_does_not_reason_to_reason_is_a_400_and_asking_for_none_is_served(sdk, claude):
    asks = [lambda: sdk.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_completion_tokens=4,
                                                reasoning_effort="high"),
            lambda: sdk.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_completion_tokens=4,
                                                extra_body={"thinking": {"type": "enabled", "budget_tokens": 2048}}),
            lambda: sdk.responses.create(model=MODEL_ID, input="Hi", max_output_tokens=16, reasoning={"effort": "low"})]
    for ask in asks:
        with pytest.raises(openai.BadRequestError) as refused:
            ask()
        assert "does not reason" in refused.value.message
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=MODEL_ID, messages=MESSAGES, max_tokens=2048,
                               thinking={"type": "enabled", "budget_tokens": 1024})
    assert "does not reason" in refused.value.message
    reply = sdk.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_completion_tokens=4,
                                        reasoning_effort="none")
    assert reply.choices[0].message.content and reply.usage.completion_tokens_details.reasoning_tokens == 0
    assert "reasoning_content" not in (reply.choices[0].message.model_extra or {})
    answered = sdk.responses.create(model=MODEL_ID, input="Hi", max_output_tokens=16, reasoning={"effort": "none"})
    assert [item.type for item in answered.output] == ["message"]
    message = claude.messages.create(model=MODEL_ID, messages=MESSAGES, max_tokens=4, thinking={"type": "disabled"})
    assert [block.type for block in message.content] == ["text"]
