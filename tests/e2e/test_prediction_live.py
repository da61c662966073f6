"""Predicted outputs on a live server with the embedded SmolLM2, through the `openai` SDK:
the reply is the same with its own text as the prediction, and the SDK reads the counts."""

from __future__ import annotations

MODEL_ID = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "user", "content": "Repeat this sentence exactly: the quick brown fox jumps over the lazy dog."}]


def create(sdk, **fields):
    return sdk.chat.completions.create(model=MODEL_ID, messages=MESSAGES, temperature=0, max_completion_tokens=32,
                                       **fields)


def test_a_right_prediction_is_kept_and_counted(sdk):
    plain = create(sdk)
    answer = plain.choices[0].message.content
    predicted = create(sdk, prediction={"type": "content", "content": answer})
    assert predicted.choices[0].message.content == answer
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens >= predicted.usage.completion_tokens // 2
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_an_edited_prediction_changes_nothing_but_the_counts(sdk):
    plain = create(sdk)
    answer = plain.choices[0].message.content
    edited = answer.replace("fox", "cat") if "fox" in answer else "A different text, " + answer
    predicted = create(sdk, prediction={"type": "content", "content": edited})
    assert predicted.choices[0].message.content == answer
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0 and details.rejected_prediction_tokens > 0
