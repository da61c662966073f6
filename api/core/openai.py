"""OpenAI shapes that chat completions and the Responses API both write: token logprobs with
their bytes, and the obfuscation padding of streamed events."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from engine.host.request import TokenLogprob
from engine.text.tokenizer import Tokenizer
from generated.openai_chat_completions import (
    ChatCompletionChoiceLogprobs,
    ChatCompletionTokenLogprob,
    ChatCompletionTopLogprob,
)

# Obfuscation padding lengths: enough spread that an event's size says little about its text.
OBFUSCATION_CHARS = (1, 24)


def token_entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> ChatCompletionTopLogprob:
    raw = tokenizer.token_bytes(token_id)
    return ChatCompletionTopLogprob(token=token_text(tokenizer, token_id, raw), logprob=logprob,
                                    bytes=None if raw is None else list(raw))


def token_text(tokenizer: Tokenizer, token_id: int, raw: bytes | None) -> str:
    """The token as text; a piece of a character is written as its bytes, as OpenAI does
    (`bytes:\\xe2\\x80`), since it has no text of its own."""
    if raw is None:
        return tokenizer.decode([token_id])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{byte:02x}" for byte in raw)


def choice_logprobs(tokenizer: Tokenizer, logprobs: Sequence[TokenLogprob]) -> ChatCompletionChoiceLogprobs:
    """The content list: each token's logprob under the model, with its top alternatives."""
    content = []
    for item in logprobs:
        chosen = token_entry(tokenizer, item.token_id, item.logprob)
        top = [token_entry(tokenizer, token, value) for token, value in item.top]
        content.append(ChatCompletionTokenLogprob(**chosen.model_dump(), top_logprobs=top))
    return ChatCompletionChoiceLogprobs(content=content, refusal=None)


def obfuscation_padding() -> str:
    low, high = OBFUSCATION_CHARS
    return secrets.token_urlsafe(high)[: low + secrets.randbelow(high - low + 1)]
