"""The /v1/responses request body: OpenAI's CreateResponseRequest, unknown fields refused at
every level (a schema violation, 400 in OpenAI's shape)."""

from __future__ import annotations

from api.core.validation import parse_body, require_object
from generated.flint import CreateResponseRequest

MODELS = (CreateResponseRequest,)


def parse(raw: object) -> CreateResponseRequest:
    return parse_body(CreateResponseRequest, require_object(raw), extra="forbid")
