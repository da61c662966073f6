"""The request bodies of the Anthropic dialect.

POST /v1/messages: Anthropic's CreateMessageRequest, plus `raw_output`, the field Fireworks'
Anthropic-compatible body adds beyond Anthropic's (generated/fireworks_streaming.py
AnthropicMessageRequest), so that a Fireworks client sending it gets a 400 naming the field
(api/messages/fields.py) rather than a schema error for an unknown one.

POST /v1/messages/count_tokens: Anthropic's CountMessageTokensRequest, the prompt-shaping
fields of the same request. Unknown fields are refused at every level of both.
"""

from __future__ import annotations

from api.core.validation import parse_body, require_object
from generated.flint import CountMessageTokensRequest, CreateMessageRequest


class MessagesBody(CreateMessageRequest):
    raw_output: bool | None = None


MODELS = (MessagesBody,)
COUNT_MODELS = (CountMessageTokensRequest,)


def parse(raw: object) -> MessagesBody:
    return parse_body(MessagesBody, require_object(raw), extra="forbid")


def parse_count(raw: object) -> CountMessageTokensRequest:
    return parse_body(CountMessageTokensRequest, require_object(raw), extra="forbid")
