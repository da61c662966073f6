"""Response objects of the Responses API: the whole response, its output message and usage.

Objects are built as JSON dicts and checked against the generated `Response` model, so a
stored response, a streamed event's response and a returned one are the same data.

Status: `completed` when the model ended its answer; `incomplete`, with
`incomplete_details.reason` `max_output_tokens`, when the token limit (or the end of the
context window) cut it; `failed`, with `error`, when generation broke off.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api.chat_response import SERVICE_TIER, choice_logprobs
from api.generation import Usage
from api.responses_input import new_id
from api.responses_request import ResponsePlan
from engine.request import TokenLogprob
from engine.tokenizer import Tokenizer
from generated.flint import Response

Json = dict[str, Any]
STATUS_BY_FINISH = {"stop": "completed", "length": "incomplete"}


@dataclass(frozen=True)
class ResponseIdentity:
    """What every object of one response shares: its id, its output message's id, when."""

    model: str
    id: str = field(default_factory=lambda: f"resp_{uuid.uuid4().hex}")
    message_id: str = field(default_factory=lambda: new_id("msg"))
    created_at: int = field(default_factory=lambda: int(time.time()))


def status_of(finish_reason: str | None) -> str:
    return STATUS_BY_FINISH.get(finish_reason, "failed")


def response_object(identity: ResponseIdentity, plan: ResponsePlan, status: str,
                    output: list[Json], usage: Json | None = None, error: Json | None = None) -> Json:
    """The Response as JSON, echoing the settings it was made with."""
    response = {
        "id": identity.id, "object": "response", "created_at": identity.created_at, "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": identity.model, "output": output, "usage": usage, **settings_of(plan),
    }
    Response.model_validate(response)  # the spec's shape, checked where it is made
    return response


def settings_of(plan: ResponsePlan) -> Json:
    """The request's settings as a Response reports them: the values in effect."""
    request, sampling = plan.request, plan.choice.sampling
    return {
        "instructions": request.instructions, "previous_response_id": request.previous_response_id,
        "temperature": sampling.temperature, "top_p": sampling.top_p, "top_logprobs": request.top_logprobs,
        "max_output_tokens": request.max_output_tokens, "metadata": plan.body.get("metadata") or {},
        "store": request.store is not False, "background": False, "service_tier": SERVICE_TIER,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "reasoning": {"effort": (plan.body.get("reasoning") or {}).get("effort"), "summary": None},
        "tool_choice": plan.body.get("tool_choice") or "auto", "tools": [], "parallel_tool_calls": True,
        "max_tool_calls": None, "truncation": "disabled", "user": request.user,
        "safety_identifier": request.safety_identifier, "prompt_cache_key": request.prompt_cache_key,
    }


def output_message(identity: ResponseIdentity, status: str, parts: list[Json]) -> Json:
    """The assistant message item of the output (`in_progress` while streaming)."""
    item_status = status if status in ("in_progress", "incomplete") else "completed"
    return {"id": identity.message_id, "type": "message", "role": "assistant", "status": item_status,
            "content": parts}


def output_text_part(text: str, logprobs: list[Json] | None) -> Json:
    part = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def logprob_entries(tokenizer: Tokenizer, logprobs: Sequence[TokenLogprob]) -> list[Json]:
    """Each token's logprob with its top alternatives: the chat completion entries, which
    have the same shape (token, logprob, bytes, top_logprobs)."""
    return [entry.model_dump(mode="json") for entry in choice_logprobs(tokenizer, logprobs).content]


def usage_object(usage: Usage) -> Json:
    return {
        "input_tokens": usage.num_prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.num_cached_tokens},
        "output_tokens": usage.num_completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},  # this model does not reason
        "total_tokens": usage.num_prompt_tokens + usage.num_completion_tokens,
    }


def failure(message: str = "generation failed before the answer was complete") -> Json:
    return {"code": "server_error", "message": message}
