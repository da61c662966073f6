"""The field registry of POST /v1/messages (api/core/registry.py): Anthropic's request, its
messages, their content blocks, metadata and cache_control.

Decisions beyond the spec (values that ask for what this server does anyway pass):
- `service_tier`: `auto` and `standard_only` are both honoured, there being one tier
  (reported as `standard` in usage);
- tools, forced tool use and thinking: the shared rules of api/core/refusals.py (`tools: []`,
  `tool_choice` `none` or `auto`, `thinking: {"type": "disabled"}` pass);
- `cache_control` breakpoints are honoured by the prefix cache, which keeps every prompt
  prefix while its pages are free (reported as cache_read_input_tokens); a `1h` ttl is
  refused, since nothing keeps a prefix for an hour;
- Fireworks' `raw_output: false` and an empty `output_config` pass, other values are refused;
- image, document, tool_use, tool_result, thinking and redacted_thinking blocks are refused:
  the served models read text only, and tools and thinking are not supported.
"""

from __future__ import annotations

from api.core import refusals
from api.core.registry import ModelFields, Planned, Refused, Registry, Sampled
from api.messages.body import MessagesBody
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
RENDERED = Planned("plan.template_conversation",
                   MESSAGES + "test_system_and_text_blocks_render_through_the_chat_template")
CACHED = Planned("api.core.prompt.chat_prompt_ids", MESSAGES + "test_cache_control_breakpoints_are_served_by_the_prefix_cache")
LOGGED = Planned("plan.plan_messages", MESSAGES + "test_user_id_is_logged")

REQUEST = ModelFields(CreateMessageRequest, {
    "model": Planned("api.core.pipeline.generate", ERRORS + "test_an_unknown_model_is_a_404_in_anthropics_shape"),
    "messages": RENDERED,
    "system": RENDERED,
    "max_tokens": Planned("plan.plan_messages", MESSAGES + "test_max_tokens_ends_the_reply"),
    "stop_sequences": Planned("plan.stop_sequences", MESSAGES + "test_stop_sequences_end_the_reply_and_are_reported"),
    "temperature": Sampled(),
    "top_p": Sampled(),
    "top_k": Sampled(),
    "metadata": LOGGED,
    "stream": Planned("api.core.pipeline.generate",
                      STREAM + "test_stream_events_come_in_anthropics_order_and_match_the_message"),
    "service_tier": refusals.refused_unless("only the default service tier is served", "auto", "standard_only"),
    "tools": refusals.NO_TOOLS,
    "tool_choice": refusals.TOOL_CHOICE,
    "thinking": refusals.THINKING,
})

# Blocks a text-only model without tools or thinking cannot take: every field is refused,
# so whichever the client gives, the 400 names the block's type in its reason.
REFUSED_BLOCKS = {
    ImageBlockParam: f"image blocks cannot be read: {refusals.TEXT_ONLY}",
    DocumentBlockParam: "document blocks cannot be read: the served model takes text blocks only",
    ToolUseBlockParam: f"tool_use blocks: {refusals.TOOLS}",
    ToolResultBlockParam: f"tool_result blocks: {refusals.TOOLS}",
    ThinkingBlockParam: f"thinking blocks: {refusals.REASONING}",
    RedactedThinkingBlockParam: f"redacted_thinking blocks: {refusals.REASONING}",
}

REGISTRY = Registry([
    REQUEST,
    # The route's body (api/messages/body.py): Anthropic's fields as above plus Fireworks' two.
    ModelFields(MessagesBody, like=CreateMessageRequest, fields={
        "output_config": refusals.refused_if_any(
            f"output configuration: {refusals.STRUCTURED_OUTPUT}, nor effort controls"),
        "raw_output": Refused("raw_output is not available on /v1/messages", bool),
    }),
    ModelFields(AnthropicMessageRequest, like=MessagesBody),  # Fireworks' spelling of the same body
    ModelFields(MessageParam, {"role": RENDERED, "content": RENDERED}),
    ModelFields(MessageRequestMetadata, {"user_id": LOGGED}),
    ModelFields(TextBlockParam, {"type": RENDERED, "text": RENDERED, "cache_control": CACHED,
                                 "citations": refusals.refused_if_any("citations are not supported")}),
    ModelFields(CacheControlEphemeral, {"type": CACHED, "ttl": refusals.refused_unless(
        "cached prefixes live while their pages are free; nothing keeps one for an hour", "5m")}),
    *[ModelFields(block_cls, {name: Refused(reason, lambda value: True) for name in block_cls.model_fields})
      for block_cls, reason in REFUSED_BLOCKS.items()],
])
