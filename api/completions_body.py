"""The /v1/completions request body: the union of the Fireworks and Friendli dialects.

Fields of either dialect are accepted (../shared/API-DIALECTS.md); a field neither defines
is a 422. Each field keeps the types its dialects give it. OpenAI's legacy `best_of` and
`suffix`, which no vendor spec lists, are accepted at their no-op values."""

from __future__ import annotations

from typing import Any

import pydantic

from api.registry import refuse_unsupported, refuse_unsupported_within
from api.validation import RequestValidationError, merged_model, parse_body, require_object
from generated import fireworks_completions as fireworks
from generated import friendli_container_completions as friendli
from generated import friendli_serverless_completions as serverless


class OpenAILegacyFields(pydantic.BaseModel):
    """OpenAI's legacy completions fields that no vendor spec lists."""

    model_config = pydantic.ConfigDict(extra="forbid")
    best_of: int | None = None
    suffix: str | None = None


DIALECT_MODELS: tuple[type[pydantic.BaseModel], ...] = (
    fireworks.CompletionRequest,
    friendli.CompletionsBodyWithPrompt,
    friendli.CompletionsBodyWithTokens,
    serverless.ServerlessCompletionsExtensionRequest,
    OpenAILegacyFields,
)

CompletionsBody = merged_model("CompletionsBody", DIALECT_MODELS)


def parse_completions_body(raw: object) -> Any:
    """A CompletionsBody from decoded JSON: 422 on schema errors, 400 on refused fields."""
    body = parse_body(CompletionsBody, require_object(raw))
    if body.prompt is None and body.tokens is None:
        raise RequestValidationError.at(["body", "prompt"], "Field required: give `prompt` or `tokens`",
                                        "missing")
    given = body.model_fields_set
    refuse_unsupported(DIALECT_MODELS, given, {name: getattr(body, name) for name in given})
    for name in sorted(given):  # nested models: stream_options, stop_tokens' token sequences
        value = getattr(body, name)
        for index, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, pydantic.BaseModel):
                refuse_unsupported_within(item, f"{name}.[{index}]." if isinstance(value, list) else f"{name}.")
    return body
