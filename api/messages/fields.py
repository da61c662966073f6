"""The field registry of POST /v1/messages and POST /v1/messages/count_tokens
(api/core/registry.py): Anthropic's requests, their messages, content blocks, metadata,
cache_control and output_config. A token count's fields are decided as a message's are.

Decisions beyond the spec (values that ask for what this server does anyway pass):
- `model` may be left out where the server serves one model (no adapter loaded): the
  body is that model's, as with vLLM's and llama.cpp's servers, whose clients and curl
  examples leave it out (api/core/state.py `with_served_model`,
  tests/api/test_model_left_out.py); with several models it stays a 400 naming it;
- `service_tier`: `auto` serves with the priority tier when the API key is granted it
  (`--priority-api-key`), `standard_only` never (api/core/tenancy.py); usage reports the
  tier that served it, `priority` or `standard`; `speed`: `standard` only, there being one speed;
  `inference_geo`: `global` only (any region), the server running where it is deployed;
- client tools and `tool_choice` (api/messages/tools.py): calls are constrained by grammar
  and read back as tool_use blocks (api/messages/tool_calls.py); `strict` tools keep to
  their schema exactly, others leniently (unsupported keywords skipped); `input_examples`
  are shown after the tool's description; `eager_input_streaming` asks for nothing (inputs
  always stream as they are generated); `defer_loading: true` (tool search) and callers
  other than `direct` (code execution) are refused, as are toolsets (`toolset_name`);
  earlier `tool_use` and `tool_result` blocks render as history (api/messages/plan.py);
- thinking (api/core/reasoning.py): `disabled`, `enabled` with its budget (below
  max_tokens), and `adaptive` (no budget: the model decides) for a model that reasons;
  a model that does not reason refuses all but `disabled`; `display: "summarized"` passes
  (the reply shows the thinking, in full: nothing is summarised), `omitted` is refused (a
  thinking block's signature signs its text, which the block must carry); thinking only
  between tool calls (`between_tools`) is refused: a reply thinks once, before it answers;
- thinking blocks given back in assistant turns are checked against their signatures
  and become that turn's reasoning (api/messages/thinking.py); redacted_thinking blocks
  are refused: this server never makes them;
- `cache_control` breakpoints, on a block, a tool or for the whole request, are honoured by
  the prefix cache, which keeps every prompt prefix while its pages are free (reported as
  cache_read_input_tokens); a `1h` ttl is refused, since nothing keeps a prefix for an hour;
- `output_config`: `format` (a JSON schema) constrains the reply's text; `effort` is refused
  but for `high`, the level a reply gets when none is asked for (a thinking budget is set
  with `thinking`);
- `container` (code execution) and `diagnostics` (prompt-cache miss reports) are refused;
- Fireworks' `raw_output: false` passes, other values are refused;
- a `system` turn inside `messages` renders as a system message where it stands;
- image, document, search_result, tool_reference, browser_state, redacted_thinking and
  Anthropic's hosted-tool blocks are refused, in messages and in tool results: the served
  models read text only, and tool search, browser toolsets and citations are not supported.
"""

from __future__ import annotations

from api.core import refusals
from api.core.registry import Accepted, ModelFields, Planned, Refused, Registry, Sampled, every_field
from api.messages.body import MessagesBody
from generated.fireworks_streaming import AnthropicMessageRequest
from generated.flint import (
    BrowserStateBlockParam,
    CacheControlEphemeral,
    ContainerUploadBlockParam,
    CountMessageTokensRequest,
    CreateMessageRequest,
    DocumentBlockParam,
    ImageBlockParam,
    JsonOutputFormat,
    MessageParam,
    MessageRequestMetadata,
    OutputConfig,
    RedactedThinkingBlockParam,
    SearchResultBlockParam,
    ServerToolResultBlockParam,
    ServerToolUseBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ThinkingConfigAdaptive,
    ThinkingConfigBetweenTools,
    ThinkingConfigDisabled,
    ThinkingConfigEnabled,
    ToolChoiceAny,
    ToolChoiceAuto,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolInputSchema,
    ToolParam,
    ToolReferenceBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

MESSAGES = "tests/api/test_messages.py::"
STREAM = "tests/api/test_messages_stream.py::"
ERRORS = "tests/api/test_messages_errors.py::"
SDK = "tests/api/test_messages_sdk_fields.py::"
TOOLS = "tests/api/test_messages_tools.py::"
RENDERED = Planned("plan.template_conversation",
                   MESSAGES + "test_system_and_text_blocks_render_through_the_chat_template")
CACHED = Planned("api.core.prompt.chat_prompt_ids", MESSAGES + "test_cache_control_breakpoints_are_served_by_the_prefix_cache")
LOGGED = Planned("plan.plan_messages", MESSAGES + "test_user_id_is_logged")
HOSTED_TOOLS = "Anthropic's hosted tools (web search, code execution, ...) are not available on this server"
READ_TOOL = Planned("tools.read_tool", TOOLS + "test_any_calls_validate_against_their_schemas")
HISTORY = Planned("plan.turns", TOOLS + "test_tool_history_renders_in_the_default_format")
FORMAT = Planned("plan.answer_grammar", TOOLS + "test_output_config_format_answers_validate")
CHOICE = "tools.read_choice"
ONE_CALL = Planned(CHOICE, TOOLS + "test_disable_parallel_tool_use_allows_one_call")
TOOLSETS = Refused("toolsets (MCP connectors) are not available on this server")
CALLER = refusals.refused_unless(f"only the model calls tools here: {HOSTED_TOOLS}", "direct")
THINKING_TESTS = "tests/api/test_messages_thinking.py::"
THINKING = Planned("api.core.reasoning.anthropic_ask", THINKING_TESTS + "test_a_thinking_budget_ends_the_thinking_block")
THINKING_HISTORY = Planned("thinking.checked_thinking",
                           THINKING_TESTS + "test_thinking_blocks_come_back_as_history_only_when_their_signature_holds")
DISPLAY = refusals.refused_unless("thinking cannot be omitted from the reply: a thinking block's signature signs its "
                                  "text, which the block must carry", "summarized")

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
    "service_tier": Planned("api.core.tenancy.anthropic_ask",
                            "tests/api/test_tenancy_http.py::test_anthropic_auto_uses_the_key_s_tier"),
    "tools": Planned("tools.messages_tools", TOOLS + "test_any_calls_validate_against_their_schemas"),
    "tool_choice": Planned(CHOICE, TOOLS + "test_a_named_tool_choice_calls_that_tool"),
    "thinking": THINKING,
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
    "format": FORMAT,
    "effort": refusals.refused_unless(
        "effort levels are not supported: every reply gets the default (`high`); a model that reasons "
        "thinks as `thinking` says", "high"),
})

# Blocks a text-only model without thinking, citations or hosted tools cannot take: every
# field is refused, so whichever the client gives, the 400 names the block's type in its reason.
REFUSED_BLOCKS = {
    ImageBlockParam: f"image blocks cannot be read: {refusals.TEXT_ONLY}",
    DocumentBlockParam: "document blocks cannot be read: the served model takes text blocks only",
    RedactedThinkingBlockParam: "redacted_thinking blocks are never made by this server: its thinking blocks come "
                                "back as they were sent, with their signature",
    SearchResultBlockParam: "search_result blocks are not supported: they are there to be cited, and citations "
                            "are not supported",
    ServerToolUseBlockParam: f"server_tool_use blocks: {HOSTED_TOOLS}",
    ServerToolResultBlockParam: f"hosted-tool result blocks: {HOSTED_TOOLS}",
    ContainerUploadBlockParam: f"container_upload blocks: {HOSTED_TOOLS}",
    ToolReferenceBlockParam: "tool_reference blocks are not supported: tool search is not available, every tool "
                             "is in the prompt from the start",
    BrowserStateBlockParam: "browser_state blocks are not supported: browser toolsets are not available on this "
                            "server",
}


TOOL_TABLES = [
    ModelFields(ToolParam, {
        "type": READ_TOOL, "name": READ_TOOL, "description": READ_TOOL, "input_schema": READ_TOOL,
        "cache_control": Planned("api.core.prompt.chat_prompt_ids",
                                 TOOLS + "test_tool_cache_control_is_served_by_the_prefix_cache"),
        "strict": Planned("tools.read_tool", TOOLS + "test_strict_tools_keep_to_their_schema"),
        "input_examples": Planned("tools.described", TOOLS + "test_input_examples_follow_the_description"),
        "defer_loading": refusals.refused_unless("tool search is not available: every tool is in the prompt "
                                                 "from the start", False),
        "eager_input_streaming": Accepted("a tool's input always streams as it is generated, in fragments that "
                                          "concatenate to the whole input, which either value allows"),
        "allowed_callers": refusals.refused_unless(f"only the model calls tools here: {HOSTED_TOOLS}", ["direct"]),
    }),
    every_field(ToolInputSchema, READ_TOOL),
    every_field(ToolChoiceAuto, Planned(CHOICE, TOOLS + "test_auto_calls_once_the_model_writes_the_trigger")),
    every_field(ToolChoiceAny, Planned(CHOICE, TOOLS + "test_any_calls_validate_against_their_schemas")),
    every_field(ToolChoiceTool, Planned(CHOICE, TOOLS + "test_a_named_tool_choice_calls_that_tool")),
    every_field(ToolChoiceNone, Planned(CHOICE, TOOLS + "test_none_answers_text_with_the_tools_in_the_prompt")),
    *[ModelFields(choice_cls, {"disable_parallel_tool_use": ONE_CALL})
      for choice_cls in (ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool)],
    ModelFields(ToolUseBlockParam, {"type": HISTORY, "id": HISTORY, "name": HISTORY, "input": HISTORY,
                                    "cache_control": CACHED, "caller": CALLER, "toolset_name": TOOLSETS}),
    ModelFields(ToolResultBlockParam, {"type": HISTORY, "tool_use_id": HISTORY, "content": HISTORY,
                                       "is_error": HISTORY, "cache_control": CACHED, "toolset_name": TOOLSETS}),
    every_field(JsonOutputFormat, FORMAT),
]

THINKING_TABLES = [
    ModelFields(ThinkingConfigEnabled, {"type": THINKING, "budget_tokens": THINKING, "display": DISPLAY}),
    ModelFields(ThinkingConfigAdaptive, {"type": THINKING, "display": DISPLAY}),
    every_field(ThinkingConfigDisabled, THINKING),
    every_field(ThinkingConfigBetweenTools, Refused("thinking only between tool calls is not served: a reply thinks "
                                                    "once, before it answers", lambda value: True)),
    every_field(ThinkingBlockParam, THINKING_HISTORY),
]

REGISTRY = Registry([
    REQUEST,
    OUTPUT_CONFIG,
    *TOOL_TABLES,
    *THINKING_TABLES,
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
    *[every_field(block_cls, Refused(reason, lambda value: True))
      for block_cls, reason in REFUSED_BLOCKS.items()],
])
