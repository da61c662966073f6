"""A parsed chat completion body (api/chat/body.py) to the engine requests of its choices.

The messages become prompt ids through the chat template (api/core/prompt.py), and the
sampling fields one SamplingParams per choice, each with its own seed. With no token
limit, or one past the context window, the reply stops at the window's end (finish_reason
"length"); Fireworks' `context_length_exceeded_behavior: "error"` refuses such a request
instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from api.chat.body import MODELS, ChatCompletionBody
from api.chat.fields import REGISTRY
from api.core import limits
from api.core.errors import ApiError, invalid
from api.core.generation import ChoiceRequest
from api.core.prompt import chat_prompt_ids
from api.core.sampling import (EngineValues, check_range, choice_seed_list, engine_values, logit_bias,
                               logprobs_count, resolve_max_tokens)
from api.core.state import ServerState
from engine.request import SamplingParams

log = logging.getLogger("flint")

# Accepted and only logged: they identify the caller, and this server bills nobody.
LOGGED_FIELDS = ("user", "safety_identifier", "prompt_cache_key", "metadata")


@dataclass(frozen=True)
class ChatPlan:
    """What the answer needs besides the generated text."""

    body: ChatCompletionBody
    raw: dict[str, Any]  # the request as given (JSON), for the store
    choices: list[ChoiceRequest]
    stream: bool
    include_usage: bool
    include_obfuscation: bool
    logprobs: bool
    timeout: float | None = None


async def plan_chat(body: ChatCompletionBody, server: ServerState) -> ChatPlan:
    """The engine requests (one per choice) and answer options of a parsed request."""
    fields = body.model_dump(mode="json", by_alias=True, exclude_unset=True)  # no deprecation warnings
    log_caller(fields)
    stream_options = fields.get("stream_options") or {}
    if stream_options and not body.stream:
        raise invalid("stream_options", "`stream_options` is only allowed with `stream: true`")
    n = 1 if body.n is None else int(check_range("n", body.n, 1, limits.MAX_CHOICES, integer=True))
    prompt_ids = await chat_prompt_ids(server, prompt_messages(fields))
    vocab_size = server.tokenizer.vocab_size
    values = engine_values(REGISTRY, MODELS, body.__dict__, body.model_fields_set, vocab_size)
    max_tokens = max_tokens_for(fields, len(prompt_ids), server.max_model_len)
    sampling = sampling_of(fields, values, vocab_size)
    stop = values.stop_criteria(strings=stop_strings(body), max_tokens=max_tokens)
    choices = [ChoiceRequest(index=i, prompt_index=0, prompt_token_ids=prompt_ids,
                             sampling=replace(sampling, seed=seed), stop=stop)
               for i, seed in enumerate(choice_seed_list(body.seed, n))]
    return ChatPlan(body=body, raw=fields, choices=choices, stream=bool(body.stream),
                    include_usage=bool(stream_options.get("include_usage")),
                    include_obfuscation=stream_options.get("include_obfuscation") is not False,
                    logprobs=bool(body.logprobs))


def prompt_messages(fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation the template renders: every message, as given."""
    return fields["messages"]


def sampling_of(fields: dict[str, Any], values: EngineValues, vocab_size: int) -> SamplingParams:
    """The planned sampling fields: logit bias and logprobs, on top of the plain ones."""
    return values.sampling_params(logit_bias=logit_bias(fields.get("logit_bias"), vocab_size),
                                  logprobs=logprobs_count(fields.get("logprobs"), fields.get("top_logprobs")))


def max_tokens_for(fields: dict[str, Any], num_prompt_tokens: int, max_model_len: int) -> int:
    """The reply's token limit: the one given, else the rest of the context window (a limit
    past the window is lowered to it, or refused with `context_length_exceeded_behavior: error`)."""
    room = max_model_len - num_prompt_tokens
    max_tokens = resolve_max_tokens(fields.get("max_tokens"), fields.get("max_completion_tokens"))
    if max_tokens is None:
        return room
    if max_tokens > room and fields.get("context_length_exceeded_behavior") == "error":
        raise ApiError(400, f"the prompt's {num_prompt_tokens} tokens and up to {max_tokens} generated "
                            f"ones exceed the context window of {max_model_len}",
                       param="context_length_exceeded_behavior", code="context_length_exceeded")
    return min(max_tokens, room)


def stop_strings(body: ChatCompletionBody) -> tuple[str, ...]:
    """`stop` as a tuple: one string, or a list of up to 4."""
    if body.stop is None:
        return ()
    stop = body.stop.root
    stops = (stop,) if isinstance(stop, str) else tuple(stop.root)
    return limits.check_strings("stop", stops, limits.MAX_STOP_STRINGS)


def log_caller(fields: dict[str, Any]) -> None:
    given = {name: fields[name] for name in LOGGED_FIELDS if fields.get(name) is not None}
    if given:
        log.info("chat completion for %s", given)
