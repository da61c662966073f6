"""The /v1/completions request body: the union of the Fireworks and Friendli dialects.

Fields of either dialect are accepted (../shared/API-DIALECTS.md); a field neither defines
is a 422. Each field keeps the types its dialects give it. OpenAI's legacy `best_of` and
`suffix`, which no vendor spec lists, are accepted at their no-op values."""

from __future__ import annotations

from typing import Any

import pydantic

from api.core.errors import RequestValidationError
from api.core.validation import merged_model, parse_body, require_object
from generated import fireworks_completions as fireworks
from generated import flint
from generated import friendli_container_completions as friendli
from generated import friendli_serverless_completions as serverless


class OpenAILegacyFields(pydantic.BaseModel):
    """OpenAI's legacy completions fields that no vendor spec lists."""

    model_config = pydantic.ConfigDict(extra="forbid")
    best_of: int | None = None
    suffix: str | None = None


# The models the body merges, whose registry tables decide its fields (api/completions/fields.py).
MODELS: tuple[type[pydantic.BaseModel], ...] = (
    fireworks.CompletionRequest,
    friendli.CompletionsBodyWithPrompt,
    friendli.CompletionsBodyWithTokens,
    serverless.ServerlessCompletionsExtensionRequest,
    flint.CompletionsExtensionRequest,
    OpenAILegacyFields,
)

CompletionsBody = merged_model("CompletionsBody", MODELS)


def parse(raw: object) -> Any:
    """A CompletionsBody from decoded JSON (a schema error raises RequestValidationError)."""
    body = parse_body(CompletionsBody, require_object(raw))
    if body.prompt is None and body.tokens is None:
        raise RequestValidationError.at(["body", "prompt"], "Field required: give `prompt` or `tokens`", "missing")
    return body
