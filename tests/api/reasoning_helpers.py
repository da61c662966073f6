"""Helpers for the reasoning tests of every dialect, on the tiny Qwen3-style app
(`qwen3_client`, tests/api/conftest.py): the served model's id, token ids read back from
chat logprobs, and a conversation that ends in a tool loop."""

from __future__ import annotations

from qwen3_tiny import QWEN3_ADDED_TOKENS

MODEL_ID = "SmolLM2-135M-Instruct"  # the app's served name; the weights are the tiny model's
ADDED_IDS = {content: 128 + index for index, (content, _) in enumerate(QWEN3_ADDED_TOKENS)}
START_ID, END_ID = ADDED_IDS["<think>"], ADDED_IDS["</think>"]
EOS_IDS = (ADDED_IDS["<|im_end|>"], ADDED_IDS["<|endoftext|>"])
# Thinking that never ends by itself and never stops: the budget must end it.
NEVER_ENDS = {str(token): -100 for token in (END_ID, *EOS_IDS)}


def posted(client, url: str, body: dict, status: int = 200) -> dict:
    """POST `body` to `url`, which must answer `status`; the answer's JSON."""
    response = client.post(url, json=body)
    assert response.status_code == status, response.text
    return response.json()


def rendered(tokenizer, messages, **variables) -> list[int]:
    """The prompt ids the chat template makes of `messages` (with template `variables`)."""
    return tokenizer.encode(tokenizer.render_chat(messages, **variables), add_special_tokens=False)


def token_id(text: str) -> int:
    """The id of a token of the tiny vocabulary, from its text (an ASCII byte or an added token)."""
    return ADDED_IDS[text] if text in ADDED_IDS else ord(text)


def logprob_ids(choice: dict) -> list[int]:
    """The generated token ids of a chat choice, read from its logprobs (every token has one)."""
    return [token_id(entry["token"]) for entry in choice["logprobs"]["content"]]


def split_ids(ids: list[int]) -> tuple[list[int], list[int]]:
    """(thoughts, answer): the ids between the tags, and those after the end tag."""
    assert ids[0] == START_ID and END_ID in ids, ids
    end = ids.index(END_ID)
    return ids[1:end], ids[end + 1:]


def texts(tokenizer, ids: list[int]) -> tuple[str, str]:
    """The reasoning and answer texts the split of `ids` must show: the section's edges
    without their newlines, as the engine trims them, and no tag's text anywhere."""
    thoughts, answer = split_ids(ids)
    answer = [token for token in answer if token not in (START_ID, END_ID)]
    return (tokenizer.decode(thoughts, skip_special_tokens=True).strip("\n"),
            tokenizer.decode(answer, skip_special_tokens=True).lstrip("\n"))


# A tool whose arguments a random model can finish: one value to choose.
TOOL = {"type": "function", "function": {"name": "multiply", "description": "Multiply 6 by 7.",
                                         "parameters": {"type": "object", "properties": {"by": {"enum": [7]}},
                                                        "required": ["by"], "additionalProperties": False}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": '{"by": 7}'}}


def tool_loop(first: str, second: str) -> list[dict]:
    """A conversation whose first answer reasoned `first`, and whose last user turn led to a
    call that reasoned `second` and got its result: the model answers next."""
    return [{"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "4", "reasoning_content": first},
            {"role": "user", "content": "And 6 x 7?"},
            {"role": "assistant", "content": "", "tool_calls": [CALL], "reasoning_content": second},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
