"""Predicted outputs: OpenAI's and Fireworks' `prediction`, and Fireworks' `speculation`.

Either names text the answer is expected to repeat (a file regenerated with a few edits).
It becomes token ids that the engine checks as drafts (engine/speculation.py): the answer
is the one the request would get without it, only sooner where it agrees.
"""

from __future__ import annotations

from typing import Any

from api.core.errors import invalid
from engine.tokenizer import Tokenizer


def prediction_token_ids(fields: dict[str, Any], tokenizer: Tokenizer, max_model_len: int) -> tuple[int, ...]:
    """The predicted output of a request body (JSON data) as token ids; empty when none.

    `prediction` is text, or `{"type": "content", "content": text or text parts}`;
    `speculation` is text or token ids. Giving both is a 400: they say the same thing."""
    prediction, speculation = fields.get("prediction"), fields.get("speculation")
    if prediction is not None and speculation is not None:
        raise invalid("speculation", "give `prediction` or `speculation`, not both: each is the predicted output")
    name, value = ("speculation", speculation) if speculation is not None else ("prediction", prediction)
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(token, int) for token in value):
        token_ids = checked_ids(name, value, tokenizer.vocab_size)
    else:
        token_ids = tokenizer.encode(predicted_text(name, value), add_special_tokens=False)
    if len(token_ids) > max_model_len:
        raise invalid(name, f"the predicted output has {len(token_ids)} tokens; at most {max_model_len} "
                            "(the model's context) can ever be used")
    return tuple(token_ids)


def predicted_text(name: str, value: Any) -> str:
    """The text of a `prediction` (a string, or a content object of text or text parts)."""
    if isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        if all(isinstance(text, str) for text in texts) and all(part.get("type") == "text" for part in content):
            return "".join(texts)
    raise invalid(name, f"`{name}` must be text, or content of text parts")


def checked_ids(name: str, token_ids: list[int], vocab_size: int) -> list[int]:
    if any(not 0 <= token < vocab_size for token in token_ids):
        raise invalid(name, f"`{name}` token ids must lie in [0, {vocab_size})")
    return token_ids
