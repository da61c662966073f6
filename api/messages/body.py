"""The /v1/messages request body: Anthropic's CreateMessageRequest, plus the two fields
Fireworks' Anthropic-compatible body adds (generated/fireworks_streaming.py
AnthropicMessageRequest), so that a Fireworks client sending them gets a 400 naming the
field (api/messages/fields.py) rather than a schema error for an unknown one. Unknown
fields are refused at every level."""

from __future__ import annotations

from typing import Any

from api.core.validation import parse_body, require_object
from generated.flint import CreateMessageRequest


class MessagesBody(CreateMessageRequest):
    output_config: dict[str, Any] | None = None
    raw_output: bool | None = None


MODELS = (MessagesBody,)


def parse(raw: object) -> MessagesBody:
    return parse_body(MessagesBody, require_object(raw), extra="forbid")
