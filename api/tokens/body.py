"""The tokenizer routes' bodies (vLLM's shapes) to token ids and back.

Tokenizing and chat rendering run in a worker thread: a large body takes seconds to encode,
and the event loop (every stream, /health) must not wait for it. The body size limit
(`--max-body-bytes`, 413 above it) bounds the work before any of it is done.
"""

from __future__ import annotations

import asyncio
from typing import Any

from api.core.errors import invalid
from api.core.limits import check_list
from api.core.prompt import render, template_messages
from api.core.state import ServerState
from api.core.validation import parse_body, require_object
from api.tokens.fields import REGISTRY
from engine.text.tokenizer import Tokenizer
from generated.flint import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest

# Template variables the request sets through its own fields, never through chat_template_kwargs.
RESERVED_TEMPLATE_VARIABLES = ("messages", "add_generation_prompt")
TokenizeRequest = TokenizeCompletionRequest | TokenizeChatRequest


def parse_tokenize(raw: object) -> TokenizeRequest:
    """The body as one of the two request shapes: `messages` picks the chat one (as vLLM
    does), so a schema error names the fields of the shape the client meant."""
    body = require_object(raw)
    request = parse_body(TokenizeChatRequest if "messages" in body else TokenizeCompletionRequest, body)
    REGISTRY.refuse_within(request)
    return request


async def tokenize(server: ServerState, request: TokenizeRequest) -> list[int]:
    """The request's token ids, computed in a worker thread."""
    tokenizer = server.tokenizer
    if isinstance(request, TokenizeCompletionRequest):
        add_special = request.add_special_tokens is not False
        return await asyncio.to_thread(tokenizer.encode, request.prompt, add_special)
    variables = template_variables(request.chat_template_kwargs)
    return await asyncio.to_thread(chat_ids, server, request, variables)


def chat_ids(server: ServerState, request: TokenizeChatRequest, variables: dict[str, Any]) -> list[int]:
    """The ids of the prompt the chat template makes of the request's messages (in a worker
    thread), their content encoded as plain text unless the server allows otherwise."""
    continues = bool(request.continue_final_message)
    if continues and request.add_generation_prompt and "add_generation_prompt" in request.model_fields_set:
        raise invalid("continue_final_message", "continue_final_message and add_generation_prompt cannot both be "
                      "true: the first continues the last message, the second opens a new assistant turn")
    if continues and not request.messages:
        raise invalid("continue_final_message", "continue_final_message needs a final message to continue")
    tokenizer = server.tokenizer
    messages = template_messages([m.model_dump() for m in request.messages], tokenizer.chat_template or "")
    prompt = render(tokenizer, messages, "messages", add_generation_prompt=bool(request.add_generation_prompt)
                    and not continues, **variables)
    if continues:
        prompt = continued_final_message(prompt, messages[-1]["content"])
    return tokenizer.encode_chat(prompt, special_tokens_in_content=server.settings.allow_special_tokens_in_content,
                                 add_special_tokens=bool(request.add_special_tokens))


def continued_final_message(prompt, final: str):
    """`prompt` ended right after the final message's content, leaving that turn open."""
    try:
        return prompt.cut_after_final_message(final)
    except ValueError:
        raise invalid("continue_final_message", "continue_final_message: the final message's content does not "
                      "appear in the rendered chat, so it cannot be continued") from None


def template_variables(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    kwargs = dict(kwargs or {})
    for name in RESERVED_TEMPLATE_VARIABLES:
        if name in kwargs:
            raise invalid("chat_template_kwargs", f"chat_template_kwargs may not set `{name}`: use the "
                          "request's own field")
    return kwargs


def token_strs(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    """Each token's piece as the vocabulary spells it (`Ġworld`), as vLLM returns them."""
    return [tokenizer.id_to_token(token) or "" for token in ids]


def parse_detokenize(raw: object, vocab_size: int, max_tokens: int) -> DetokenizeRequest:
    """The body, its ids in the vocabulary and no more of them than one sequence can hold."""
    request = parse_body(DetokenizeRequest, require_object(raw))
    REGISTRY.refuse_within(request)
    check_list("tokens", request.tokens, max_tokens, "token ids (the context window)")
    outside = [token for token in request.tokens if not 0 <= token < vocab_size]
    if outside:
        raise invalid("tokens", f"tokens must lie in [0, {vocab_size}); got {outside[0]}")
    return request
