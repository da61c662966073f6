"""Field registry entries for POST /v1/messages (Anthropic Messages): the request, its
messages, their content blocks, metadata and cache_control. Each handled field names the
test that proves it; see api/registry.py.

Decisions beyond the spec (values that ask for what this server does anyway pass):
- `service_tier`: `auto` and `standard_only` are both honoured, there being one tier
  (reported as `standard` in usage);
- `tools: []`, `tool_choice` `none` or `auto` (no tool given, so none is called) and
  `thinking: {"type": "disabled"}` pass; tools, forced tool use and thinking are refused;
- `cache_control` breakpoints are honoured by the prefix cache, which keeps every prompt
  prefix while its pages are free (reported as cache_read_input_tokens); a `1h` ttl is
  refused, since nothing keeps a prefix for an hour;
- Fireworks' `raw_output: false` and an empty `output_config` pass, other values are refused;
- image, document, tool_use, tool_result, thinking and redacted_thinking blocks are refused:
  the served models read text only, and tools and thinking are not supported.
"""

from __future__ import annotations

from typing import Any

from api.messages_body import MessagesBody
from api.registry import Refusal, register, register_like
from generated.fireworks_streaming import AnthropicMessageRequest
from generated.flint import (
    CacheControlEphemeral,
    CreateMessageRequest,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    MessageRequestMetadata,
    RedactedThinkingBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

MESSAGES = "tests/api/test_messages.py::"
STREAM = "tests/api/test_messages_stream.py::"
ERRORS = "tests/api/test_messages_errors.py::"
RENDERED = MESSAGES + "test_system_and_text_blocks_render_through_the_chat_template"
SAMPLING = MESSAGES + "test_sampling_fields_reach_the_engine"
CACHED = MESSAGES + "test_cache_control_breakpoints_are_served_by_the_prefix_cache"
NO_TOOLS = "tool use is not supported yet"


def kind(value: Any) -> Any:
    """The `type` of a tagged value (a model, a RootModel or a dict), or the value itself."""
    value = getattr(value, "root", value)
    if isinstance(value, dict):
        return value.get("type")
    return getattr(value, "type", value)


def unless_kind(*accepted: str, reason: str) -> Refusal:
    return Refusal(reason, applies=lambda value: value is not None and kind(value) not in accepted)


def non_empty(reason: str) -> Refusal:
    return Refusal(reason, applies=lambda value: bool(value))


REQUEST_HANDLED = {
    "model": ERRORS + "test_an_unknown_model_is_a_404_in_anthropics_shape",
    "messages": RENDERED,
    "system": RENDERED,
    "max_tokens": MESSAGES + "test_max_tokens_ends_the_reply",
    "stop_sequences": MESSAGES + "test_stop_sequences_end_the_reply_and_are_reported",
    "temperature": SAMPLING,
    "top_p": SAMPLING,
    "top_k": SAMPLING,
    "metadata": MESSAGES + "test_user_id_is_logged",
    "stream": STREAM + "test_stream_events_come_in_anthropics_order_and_match_the_message",
    "service_tier": ERRORS + "test_values_that_ask_for_nothing_are_accepted",
}
REQUEST_REFUSED = {
    "tools": non_empty(NO_TOOLS),
    "tool_choice": unless_kind("none", "auto", reason=f"{NO_TOOLS}, so no tool can be required"),
    "thinking": unless_kind("disabled", reason="extended thinking is not supported: the served model "
                                               "has no thinking mode"),
}
register(CreateMessageRequest, handled=REQUEST_HANDLED, refused=REQUEST_REFUSED)


# The route's body (api/messages_body.py): Anthropic's fields as above plus Fireworks' two.
register_like(MessagesBody, CreateMessageRequest)
register(MessagesBody, handled={}, refused={
    "output_config": non_empty("output configuration (structured output, effort) is not supported yet"),
    "raw_output": Refusal("raw_output is not available on /v1/messages", applies=lambda value: bool(value)),
})
register_like(AnthropicMessageRequest, MessagesBody)  # Fireworks' spelling of the same body

register(MessageParam, handled={"role": RENDERED, "content": RENDERED})
register(MessageRequestMetadata, handled={"user_id": MESSAGES + "test_user_id_is_logged"})
register(TextBlockParam, handled={"type": RENDERED, "text": RENDERED, "cache_control": CACHED},
         refused={"citations": non_empty("citations are not supported")})
register(CacheControlEphemeral, handled={"type": CACHED}, refused={
    "ttl": Refusal("cached prefixes live while their pages are free; nothing keeps one for an hour",
                   applies=lambda value: value is not None and kind(value) != "5m"),
})

# Blocks a text-only model without tools or thinking cannot take: every field is refused,
# so whichever the client gives, the 400 names the block's type in its reason.
REFUSED_BLOCKS = {
    ImageBlockParam: "image blocks cannot be read: the served model is text-only",
    DocumentBlockParam: "document blocks cannot be read: the served model takes text blocks only",
    ToolUseBlockParam: f"tool_use blocks: {NO_TOOLS}",
    ToolResultBlockParam: f"tool_result blocks: {NO_TOOLS}",
    ThinkingBlockParam: "thinking blocks: extended thinking is not supported",
    RedactedThinkingBlockParam: "redacted_thinking blocks: extended thinking is not supported",
}
for block_cls, reason in REFUSED_BLOCKS.items():
    register(block_cls, handled={}, refused={name: Refusal(reason, applies=lambda value: True)
                                             for name in block_cls.model_fields})
