"""The /v1/messages request body: Anthropic's CreateMessageRequest, plus the two fields
Fireworks' Anthropic-compatible body adds (generated/fireworks_streaming.py
AnthropicMessageRequest), so that a Fireworks client sending them gets a 400 naming the
field (api/messages_fields.py) rather than a 422 for an unknown one."""

from __future__ import annotations

from typing import Any

from generated.flint import CreateMessageRequest


class MessagesBody(CreateMessageRequest):
    output_config: dict[str, Any] | None = None
    raw_output: bool | None = None
