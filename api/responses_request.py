"""A Responses API request body to the engine request of its one answer.

The body is validated against the generated model (unknown fields refused at every level),
every given field is checked against the field registry (api/responses_fields.py), the
conversation (a stored predecessor's turns, then the instructions and this input) becomes
prompt ids through the chat template, and the sampling fields one SamplingParams.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from api.chat_messages import chat_prompt_ids
from api.errors import ApiError
from api.generation import ChoiceRequest
from api.registry import refuse_unsupported_within
from api.responses_fields import LOGPROBS_INCLUDE  # (importing it registers the fields)
from api.responses_input import Item, chat_messages, request_items
from api.sampling_fields import choice_seed_list, sampling_params
from api.state import ServerState
from api.store import StoredResponse
from api.validation import parse_body, require_object
from engine.request import SamplingParams
from generated.flint import CreateResponseRequest

log = logging.getLogger("flint")

# Accepted and only logged: they identify the caller, and this server bills nobody.
LOGGED_FIELDS = ("user", "safety_identifier", "prompt_cache_key")


@dataclass(frozen=True)
class ResponsePlan:
    """What the response needs besides the generated text."""

    request: CreateResponseRequest
    body: dict[str, Any]  # the request as given (JSON), for the store
    history: list[Item]  # the stored conversation this one continues, oldest first
    input_items: list[Item]  # this request's input as stored items
    choice: ChoiceRequest
    logprobs: bool  # output_text parts carry logprobs

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)

    @property
    def include_obfuscation(self) -> bool:
        options = self.request.stream_options
        return options is None or options.include_obfuscation is not False


def parse_response_request(raw: object) -> CreateResponseRequest:
    """The body as a CreateResponseRequest; 422 on a schema violation at any depth, 400 for
    a field the registry refuses."""
    request = parse_body(CreateResponseRequest, require_object(raw), extra="forbid")
    refuse_unsupported_within(request)
    return request


def conversation_of(stored: StoredResponse) -> list[Item]:
    """Every turn of a stored response's conversation: its history, input and output."""
    return [*stored.request.get("history", []), *stored.input_items, *stored.response["output"]]


def plan_response(server: ServerState, request: CreateResponseRequest,
                  previous: StoredResponse | None) -> ResponsePlan:
    """The engine request and response options of a parsed request; `previous`: the stored
    response that `previous_response_id` names."""
    fields = request.model_dump(mode="json", by_alias=True, exclude_unset=True)
    log_caller(fields)
    if request.stream_options is not None and not request.stream:
        raise ApiError(400, "`stream_options` is only allowed with `stream: true`", param="stream_options")
    history = conversation_of(previous) if previous is not None else []
    items = request_items(request)
    prompt_ids = prompt_token_ids(server, chat_messages(request.instructions, history, items))
    sampling = response_sampling(request, server.tokenizer.vocab_size, server.max_model_len - len(prompt_ids))
    sampling = replace(sampling, seed=choice_seed_list(None, 1)[0])  # the Responses API takes no seed
    choice = ChoiceRequest(index=0, prompt_index=0, prompt_token_ids=prompt_ids, sampling=sampling)
    return ResponsePlan(request=request, body=fields, history=history, input_items=items, choice=choice,
                        logprobs=sampling.logprobs is not None)


def prompt_token_ids(server: ServerState, messages: list[Item]) -> list[int]:
    try:
        prompt_ids = chat_prompt_ids(server.tokenizer, messages)
    except ApiError as error:  # the template refused: the input is at fault, not `messages`
        error.body.error.param = "input"
        raise
    if len(prompt_ids) >= server.max_model_len:
        raise ApiError(400, f"the conversation makes a prompt of {len(prompt_ids)} tokens; this server's "
                            f"context window is {server.max_model_len} tokens, with room for at least one "
                            "generated token", param="input", code="context_length_exceeded")
    return prompt_ids


def response_sampling(request: CreateResponseRequest, vocab_size: int, room: int) -> SamplingParams:
    """SamplingParams of the request. `max_output_tokens` is an upper bound, so the answer
    stops at the end of the context window if that comes first (and without it)."""
    values = {"temperature": request.temperature, "top_p": request.top_p,
              "max_tokens": min(request.max_output_tokens or room, room),
              "logprobs": logprobs_count(request)}
    return sampling_params(values, vocab_size)


def logprobs_count(request: CreateResponseRequest) -> int | None:
    """Alternatives per token when the output's logprobs are included, else None."""
    included = any(item.value == LOGPROBS_INCLUDE for item in request.include or [])
    if request.top_logprobs is not None and not included:
        raise ApiError(400, f"`top_logprobs` needs `include: [\"{LOGPROBS_INCLUDE}\"]`", param="top_logprobs")
    return (request.top_logprobs or 0) if included else None


def log_caller(fields: dict[str, Any]) -> None:
    given = {name: fields[name] for name in LOGGED_FIELDS if fields.get(name) is not None}
    if given:
        log.info("response for %s", given)
