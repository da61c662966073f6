"""The field registry of POST /v1/messages and POST /v1/messages/count_tokens
(api/core/registry.py): Anthropic's requests, their messages, content blocks, metadata,
cache_control and output_config. A token count's fields are decided as a message's are.

Decisions beyond the spec (values that ask for what this server does anyway pass):
- `service_tier`: `auto` and `standard_only` are both honoured, there being one tier
  (reported as `standard` in usage); `speed`: `standard` only, there being one speed;
  `inference_geo`: `global` only (any region), the server running where it is deployed;
- tools, forced tool use and thinking: the shared rules of api/core/refusals.py (`tools: []`,
  `tool_choice` `none` or `auto`, `thinking: {"type": "disabled"}` pass; adaptive thinking
  is refused like any other);
- `cache_control` breakpoints, on a block or for the whole request, are honoured by the
  prefix cache, which keeps every prompt prefix while its pages are free (reported as
  cache_read_input_tokens); a `1h` ttl is refused, since nothing keeps a prefix for an hour;
- `output_config`: an empty one passes; `format` (structured output) is refused, and so is
  `effort` but for `high`, the level a reply gets when none is asked for;
- `container` (code execution) and `diagnostics` (prompt-cache miss reports) are refused;
- Fireworks' `raw_output: false` passes, other values are refused;
- a `system` turn inside `messages` renders as a system message where it stands;
- image, document, search_result, tool_use, tool_result, thinking, redacted_thinking and
  Anthropic's hosted-tool blocks are refused: the served models read text only, and tools,
  citations and thinking are not supported.
"""

from __future__ import annotations

from api.core import refusals
from api.core.registry import Accepted, ModelFields, Planned, Refused, Registry, Sampled
from api.messages.body import MessagesBody
from generated.fireworks_streaming import AnthropicMessageRequest
from generated.flint import (
    CacheControlEphemeral,
    ContainerUploadBlockParam,
    CountMessageTokensRequest,
    CreateMessageRequest,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    MessageRequestMetadata,
    OutputConfig,
    RedactedThinkingBlockParam,
    SearchResultBlockParam,
    ServerToolResultBlockParam,
    ServerToolUseBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

MESSAGES = "tests/api/test_messages.py::"
STREAM = "tests/api/test_messages_stream.py::"
ERRORS = "tests/api/test_messages_errors.py::"
SDK = "tests/api/test_messages_sdk_fields.py::"
RENDERED = Planned("plan.template_conversation",
                   MESSAGES + "test_system_and_text_blocks_render_through_the_chat_template")
CACHED = Planned("api.core.prompt.chat_prompt_ids", MESSAGES + "test_cache_control_breakpoints_are_served_by_the_prefix_cache")
LOGGED = Planned("plan.plan_messages", MESSAGES + "test_user_id_is_logged")
HOSTED_TOOLS = "Anthropic's hosted tools (web search, code execution, ...) are not available on this server"

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
    "cache_control": Planned("api.core.prompt.chat_prompt_ids",
                             SDK + "test_top_level_cache_control_is_served_by_the_prefix_cache"),
    "speed": refusals.refused_unless("there is no fast mode: every request runs at this server's one speed",
                                     "standard"),
    "inference_geo": refusals.refused_unless(
        "this server runs inference where it is deployed and cannot choose a region", "global"),
    "container": Refused(f"code-execution containers: {HOSTED_TOOLS}"),
    "diagnostics": Refused("prompt-cache diagnostics are not reported"),
    "output_config": Accepted("it only holds `format` and `effort`, each decided by its own entry"),
})

# output_config's options.
OUTPUT_CONFIG = ModelFields(OutputConfig, {
    "format": Refused("structured outputs are not served yet"),
    "effort": refusals.refused_unless(
        "effort levels are not supported: the served model has no effort or reasoning control, "
        "so every reply gets the default (`high`)", "high"),
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
    SearchResultBlockParam: "search_result blocks are not supported: they are there to be cited, and citations "
                            "are not supported",
    ServerToolUseBlockParam: f"server_tool_use blocks: {HOSTED_TOOLS}",
    ServerToolResultBlockParam: f"hosted-tool result blocks: {HOSTED_TOOLS}",
    ContainerUploadBlockParam: f"container_upload blocks: {HOSTED_TOOLS}",
}

REGISTRY = Registry([
    REQUEST,
    OUTPUT_CONFIG,
    # The route's body (api/messages/body.py): Anthropic's fields as above plus Fireworks' raw_output.
    ModelFields(MessagesBody, like=CreateMessageRequest, fields={
        "raw_output": Refused("raw_output is not available on /v1/messages", bool),
    }),
    ModelFields(AnthropicMessageRequest, like=MessagesBody),  # Fireworks' spelling of the same body
    # POST /v1/messages/count_tokens: every field is one of a message's, decided the same way.
    ModelFields(CountMessageTokensRequest, like=CreateMessageRequest),
    ModelFields(MessageParam, {"role": RENDERED, "content": RENDERED}),
    ModelFields(MessageRequestMetadata, {"user_id": LOGGED}),
    ModelFields(TextBlockParam, {"type": RENDERED, "text": RENDERED, "cache_control": CACHED,
                                 "citations": refusals.refused_if_any("citations are not supported")}),
    ModelFields(CacheControlEphemeral, {"type": CACHED, "ttl": refusals.refused_unless(
        "cached prefixes live while their pages are free; nothing keeps one for an hour", "5m")}),
    *[ModelFields(block_cls, {name: Refused(reason, lambda value: True) for name in block_cls.model_fields})
      for block_cls, reason in REFUSED_BLOCKS.items()],
])
