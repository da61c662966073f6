"""/v1/tokenize and /v1/detokenize (vLLM's shapes): request bodies to token ids and back."""

from __future__ import annotations

from typing import Any

from api.chat_messages import render_prompt, template_message
from api.errors import ApiError
from api.tokens_fields import refuse_unregistered
from api.validation import parse_body, require_object
from engine.tokenizer import Tokenizer
from generated.flint import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest

# Template variables the request sets through its own fields, never through chat_template_kwargs.
RESERVED_TEMPLATE_VARIABLES = ("messages", "add_generation_prompt")


def parse_tokenize_request(raw: object) -> TokenizeCompletionRequest | TokenizeChatRequest:
    """The body as one of the two request shapes: `messages` picks the chat one (as vLLM
    does), so a schema error names the fields of the shape the client meant."""
    body = require_object(raw)
    request = parse_body(TokenizeChatRequest if "messages" in body else TokenizeCompletionRequest, body)
    refuse_unregistered(request)
    return request


def tokenize(tokenizer: Tokenizer, request: TokenizeCompletionRequest | TokenizeChatRequest) -> list[int]:
    if isinstance(request, TokenizeCompletionRequest):
        return tokenizer.encode(request.prompt, add_special_tokens=request.add_special_tokens is not False)
    return tokenizer.encode(chat_text(tokenizer, request), add_special_tokens=bool(request.add_special_tokens))


def chat_text(tokenizer: Tokenizer, request: TokenizeChatRequest) -> str:
    """The prompt the chat template makes of the request's messages."""
    continues = bool(request.continue_final_message)
    if continues and request.add_generation_prompt and "add_generation_prompt" in request.model_fields_set:
        raise ApiError(400, "continue_final_message and add_generation_prompt cannot both be true: the "
                       "first continues the last message, the second opens a new assistant turn",
                       param="continue_final_message")
    if continues and not request.messages:
        raise ApiError(400, "continue_final_message needs a final message to continue",
                       param="continue_final_message")
    messages = [m.model_dump() for m in request.messages]
    text = render_prompt(tokenizer, messages, add_generation_prompt=bool(request.add_generation_prompt)
                         and not continues, **template_variables(request.chat_template_kwargs))
    if not continues:
        return text
    final = template_message(messages[-1], len(messages) - 1, tokenizer.chat_template or "")
    return cut_after_final_message(text, final["content"])


def template_variables(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    kwargs = dict(kwargs or {})
    for name in RESERVED_TEMPLATE_VARIABLES:
        if name in kwargs:
            raise ApiError(400, f"chat_template_kwargs may not set `{name}`: use the request's own "
                           "field", param="chat_template_kwargs")
    return kwargs


def cut_after_final_message(text: str, final: str) -> str:
    """`text` ended right after the final message's content, leaving that turn open.

    As transformers' `continue_final_message`: the template may have stripped the content's
    surrounding whitespace, so the stripped content is searched for."""
    stripped = final.strip()
    start = text.rfind(stripped) if stripped else -1
    if start < 0:
        raise ApiError(400, "continue_final_message: the final message's content does not appear in "
                       "the rendered chat, so it cannot be continued", param="continue_final_message")
    keeps_spacing = text[start: start + len(final.lstrip())] == final.lstrip()
    return text[: start + len(final.lstrip() if keeps_spacing else stripped)]


def token_strs(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    """Each token's own text, as the spec's example shows (" world", not the vocabulary's "Ġworld")."""
    return [tokenizer.decode([token]) for token in ids]


def parse_detokenize_request(raw: object, vocab_size: int) -> DetokenizeRequest:
    request = parse_body(DetokenizeRequest, require_object(raw))
    refuse_unregistered(request)
    outside = [token for token in request.tokens if not 0 <= token < vocab_size]
    if outside:
        raise ApiError(400, f"tokens must lie in [0, {vocab_size}); got {outside[0]}", param="tokens")
    return request
