"""Predicted outputs: OpenAI's and Fireworks' `prediction`, and Fireworks' `speculation`.

Either names text the answer is expected to repeat (a file regenerated with a few edits).
It becomes token ids that the engine checks as drafts (engine/host/speculation.py): the answer
is the one the request would get without it, only sooner where it agrees.

A prediction may be as large as the body limit, and encoding megabytes takes seconds, so
its size is checked against the context window before anything else is done with it, and
the reading and encoding run in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from api.core.errors import invalid
from api.core.prompt import check_text_size
from api.core.state import ServerState

PREDICTION_FIELDS = {"prediction", "speculation"}


async def prediction_token_ids(body: Any, server: ServerState) -> tuple[int, ...]:
    """The predicted output of a parsed request body (chat or completions) as token ids;
    empty when none.

    `prediction` is text, or `{"type": "content", "content": text or text parts}`;
    `speculation` is text or token ids. Giving both is a 400: they say the same thing."""
    if body.prediction is None and body.speculation is None:
        return ()  # the common case, without a trip to a worker thread
    return await asyncio.to_thread(predicted_ids, body, server)


def predicted_ids(body: Any, server: ServerState) -> tuple[int, ...]:
    """(In a worker thread.) The given prediction as token ids, its size checked first."""
    given = body.model_dump(mode="json", include=PREDICTION_FIELDS, exclude_none=True)
    if len(given) == len(PREDICTION_FIELDS):
        raise invalid("speculation", "give `prediction` or `speculation`, not both: each is the predicted output")
    [(name, value)] = given.items()
    if isinstance(value, list) and all(isinstance(token, int) for token in value):
        check_fits_context(name, len(value), server.max_model_len)  # before each id is looked at
        return tuple(checked_ids(name, value, server.tokenizer.vocab_size))
    text = predicted_text(name, value)
    check_text_size(server, len(text.encode()), name)  # text that cannot fit is never encoded
    token_ids = server.tokenizer.encode(text, add_special_tokens=False)
    check_fits_context(name, len(token_ids), server.max_model_len)
    return tuple(token_ids)


def check_fits_context(name: str, num_tokens: int, max_model_len: int) -> None:
    if num_tokens > max_model_len:
        raise invalid(name, f"the predicted output has {num_tokens} tokens; at most {max_model_len} "
                            "(the model's context) can ever be used")


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
