"""A parsed chat completion body (api/chat_body.py) to the engine requests of its choices.

The messages become prompt ids through the chat template (api/chat_messages.py), and the
sampling fields become one SamplingParams per choice, each with its own seed. With no
token limit, or one past the context window, the reply stops at the window's end
(finish_reason "length"); Fireworks' `context_length_exceeded_behavior: "error"` refuses
such a request instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from api.chat_body import ChatCompletionBody
from api.chat_messages import chat_prompt_ids
from api.errors import ApiError
from api.generation import ChoiceRequest
from api.sampling_fields import choice_seed_list, logprobs_count, resolve_max_tokens, sampling_params
from api.state import ServerState
from engine.request import SamplingParams

log = logging.getLogger("flint")

# Chat fields that go straight to `sampling_params` under the same name (OpenAI's, then
# the Fireworks extensions).
SAMPLING_FIELD_NAMES = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "logit_bias",
                        "top_k", "min_p", "typical_p", "repetition_penalty", "mirostat_target",
                        "mirostat_lr", "ignore_eos")
# Accepted and only logged: they identify the caller, and this server bills nobody.
LOGGED_FIELDS = ("user", "safety_identifier", "prompt_cache_key", "metadata")


@dataclass(frozen=True)
class ChatPlan:
    """What the response needs besides the generated text."""

    choices: list[ChoiceRequest]
    stream: bool
    include_usage: bool
    include_obfuscation: bool
    logprobs: bool


def plan_chat(server: ServerState, request: ChatCompletionBody) -> ChatPlan:
    """The engine requests (one per choice) and response options of a parsed request."""
    fields = request.model_dump(exclude_unset=True)  # deprecated fields read without warnings
    log_caller(fields)
    stream_options = fields.get("stream_options") or {}
    if stream_options and not request.stream:
        raise ApiError(400, "`stream_options` is only allowed with `stream: true`", param="stream_options")
    prompt_ids = chat_prompt_ids(server.tokenizer, fields["messages"])
    check_prompt_fits(prompt_ids, server.max_model_len)
    sampling = chat_sampling(fields, server.tokenizer.vocab_size, server.max_model_len - len(prompt_ids))
    if fields.get("context_length_exceeded_behavior") == "error":
        check_reply_fits(len(prompt_ids), sampling.max_tokens, server.max_model_len)
    stops = stop_strings(request)
    choices = [ChoiceRequest(index=i, prompt_index=0, prompt_token_ids=prompt_ids,
                             sampling=replace(sampling, seed=seed), stops=stops)
               for i, seed in enumerate(choice_seed_list(request.seed, request.n or 1))]
    return ChatPlan(choices=choices, stream=bool(request.stream),
                    include_usage=bool(stream_options.get("include_usage")),
                    include_obfuscation=stream_options.get("include_obfuscation") is not False,
                    logprobs=bool(request.logprobs))


def chat_sampling(fields: dict[str, Any], vocab_size: int, room: int) -> SamplingParams:
    """SamplingParams of the request's sampling fields; with no token limit given, the
    reply may run to the end of the context window (as OpenAI's models do)."""
    values = {name: fields.get(name) for name in SAMPLING_FIELD_NAMES}
    max_tokens = resolve_max_tokens(fields)
    values["max_tokens"] = max_tokens if max_tokens is not None else room
    values["logprobs"] = logprobs_count(fields.get("logprobs"), fields.get("top_logprobs"))
    return sampling_params(values, vocab_size)


def check_prompt_fits(prompt_ids: list[int], max_model_len: int) -> None:
    if len(prompt_ids) >= max_model_len:
        raise ApiError(400, f"the messages make a prompt of {len(prompt_ids)} tokens; this server's "
                            f"context window is {max_model_len} tokens, with room for at least one "
                            "generated token", param="messages", code="context_length_exceeded")


def check_reply_fits(num_prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
    if num_prompt_tokens + max_tokens > max_model_len:
        raise ApiError(400, f"the prompt's {num_prompt_tokens} tokens and up to {max_tokens} generated "
                            f"ones exceed the context window of {max_model_len}",
                       param="context_length_exceeded_behavior", code="context_length_exceeded")


def stop_strings(request: ChatCompletionBody) -> tuple[str, ...]:
    """`stop` as a tuple: one string, or a list of up to 4 (the schema caps the count)."""
    if request.stop is None:
        return ()
    stop = request.stop.root
    stops = (stop,) if isinstance(stop, str) else tuple(stop.root)
    if "" in stops:
        raise ApiError(400, "`stop` strings must not be empty", param="stop")
    return stops


def log_caller(fields: dict[str, Any]) -> None:
    given = {name: fields[name] for name in LOGGED_FIELDS if fields.get(name) is not None}
    if given:
        log.info("chat completion for %s", given)
