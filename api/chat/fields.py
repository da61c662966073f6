"""The field registry of the chat routes (api/core/registry.py): POST /v1/chat/completions (OpenAI's
request, and the Fireworks chat fields OpenAI lacks), its messages, content parts and
stream_options, and POST /v1/chat/completions/{id} (a stored completion's metadata).

Decisions beyond the spec (the values that ask for what this server does anyway pass):
- `model` may be left out where the server serves one model (no adapter loaded): the
  body is that model's, as with vLLM's and llama.cpp's servers, whose clients and curl
  examples leave it out (api/core/state.py `with_served_model`,
  tests/api/test_model_left_out.py); with several models it stays a 400 naming it;
- `verbosity`: only `medium`, the spec's default, which asks for nothing in particular;
- `modalities`: `["text"]`; `prompt_cache_retention`: `in_memory` (the prefix cache); `24h`
  is refused;
- tools (api/chat/tools.py) and response formats (api/core/structured.py) constrain the
  answer by grammar;
- `service_tier` `priority` is the priority tier, every other value the default tier;
  `prompt_cache_isolation_key` partitions the prefix cache; `prompt_cache_key` names the
  session whose pages are kept (api/core/tenancy.py). The answer's `service_tier` is the
  tier that served it;
- reasoning: `reasoning_effort` in every Fireworks form, Fireworks' `thinking` (not both)
  and `reasoning_history` are read by api/core/reasoning.py, and an assistant message's
  `reasoning_content` reaches the template as the history mode says; the answer's thinking
  is `reasoning_content` (api/chat/reasoning.py). A model that does not reason refuses
  every value that asks for reasoning, naming the field;
- `store: true` keeps the completion (api/chat/store.py); `metadata` is stored with it.
"""

from __future__ import annotations

from api.core import refusals
from api.chat.reasoning import AssistantMessage
from api.core.registry import ModelFields, Planned, Refused, Registry, Sampled, Stopping, every_field
from generated import fireworks_completions
from generated import fireworks_streaming as fireworks
from generated.openai_chat_completions import (
    ChatCompletionAllowedToolChoice,
    ChatCompletionAllowedTools,
    ChatCompletionContentPartFile,
    ChatCompletionContentPartImage,
    ChatCompletionContentPartInputAudio,
    ChatCompletionContentPartRefusal,
    ChatCompletionContentPartText,
    ChatCompletionCustomTool,
    ChatCompletionCustomToolCallInput,
    ChatCompletionFunctionCall,
    ChatCompletionFunctionCallOption,
    ChatCompletionFunctions,
    ChatCompletionFunctionTool,
    ChatCompletionMessageCustomToolCall,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionNamedToolChoice,
    ChatCompletionNamedToolChoiceCustom,
    ChatCompletionNamedToolChoiceCustomTool,
    ChatCompletionNamedToolChoiceFunction,
    ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestDeveloperMessage,
    ChatCompletionRequestFunctionMessage,
    ChatCompletionRequestSystemMessage,
    ChatCompletionRequestToolMessage,
    ChatCompletionRequestUserMessage,
    ChatCompletionPredictionContent,
    ChatCompletionStreamOptions,
    CreateChatCompletionRequest,
    CustomToolDefinition,
    CustomToolGrammar,
    CustomToolGrammarFormat,
    CustomToolTextFormat,
    FunctionDefinition,
    JsonSchemaFormat,
    ResponseFormatJsonObject,
    ResponseFormatJsonSchema,
    ResponseFormatText,
    UpdateChatCompletionRequest,
)

CHAT = "tests/api/test_chat.py::"
STREAM = "tests/api/test_chat_stream.py::"
REFUSALS = "tests/api/test_chat_refusals.py::"
TOOLS = "tests/api/test_chat_tools.py::"
FORMATS = "tests/api/test_chat_formats.py::"
REASONING = "tests/api/test_chat_reasoning.py::"
EFFORT = Planned("api.core.reasoning.effort_ask", REASONING + "test_every_reasoning_effort_form_sets_the_thinking_budget")
REASONING_CONTENT = Planned("api.core.prompt.template_message",
                            REASONING + "test_reasoning_history_decides_which_reasoning_reaches_the_prompt")
HISTORY = Planned("api.core.tool_prompt.tool_conversation", TOOLS + "test_tool_history_renders_in_the_default_format")
STORE = "tests/api/test_store_chat.py::"
RENDERED = Planned("plan.prompt_messages", CHAT + "test_every_role_renders_through_the_chat_template")
CALLER = Planned("plan.log_caller", CHAT + "test_caller_fields_are_logged")
PREDICTION = Planned("api.core.prediction.prediction_token_ids",
                     "tests/api/test_prediction.py::test_a_chat_prediction_in_every_form_leaves_the_answer_unchanged")
TENANCY = "tests/api/test_tenancy_http.py::"
NO_OP_WHEN_FALSE = Refused("this extension is not served on chat completions; false changes nothing", bool)
MESSAGE_FIELDS = {"role": RENDERED, "content": RENDERED, "name": RENDERED}

REQUEST = ModelFields(CreateChatCompletionRequest, {
    "messages": RENDERED,
    "model": Planned("api.core.pipeline.generate", REFUSALS + "test_unknown_model_is_404"),
    "max_completion_tokens": Planned("plan.max_tokens_for", CHAT + "test_max_completion_tokens_limits_the_reply"),
    "max_tokens": Planned("plan.max_tokens_for", CHAT + "test_deprecated_max_tokens_limits_the_reply"),
    "n": Planned("plan.plan_chat", CHAT + "test_n_choices_with_a_seed_differ_and_repeat"),
    "seed": Planned("plan.plan_chat", CHAT + "test_n_choices_with_a_seed_differ_and_repeat"),
    "stop": Planned("plan.stop_strings", CHAT + "test_stop_strings_cut_the_reply"),
    **{name: Sampled() for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty")},
    "logit_bias": Planned("plan.sampling_of", CHAT + "test_logit_bias_forces_a_token"),
    "logprobs": Planned("plan.sampling_of", CHAT + "test_logprobs_content_matches_the_engine"),
    "top_logprobs": Planned("plan.sampling_of", CHAT + "test_logprobs_content_matches_the_engine"),
    "stream": Planned("api.core.pipeline.generate", STREAM + "test_stream_chunks_arrive_in_order_and_match_the_reply"),
    "stream_options": Planned("plan.plan_chat", STREAM + "test_include_usage_adds_a_last_usage_chunk"),
    "metadata": CALLER,
    "user": CALLER,
    "safety_identifier": CALLER,
    "prompt_cache_key": Planned("api.core.tenancy.openai_ask",
                                TENANCY + "test_session_ids_keep_their_pages_and_move_the_metrics"),
    "store": Planned("store.stored_at_end", STORE + "test_stored_completion_is_retrieved_as_returned"),
    "modalities": refusals.refused_unless(f"{refusals.TEXT_ONLY}: it writes text only", ["text"]),
    "audio": f"{refusals.TEXT_ONLY}: it cannot speak",
    "reasoning_effort": EFFORT,
    "verbosity": refusals.refused_unless("verbosity controls are not supported", "medium"),
    "response_format": Planned("plan.answer_grammar", FORMATS + "test_json_schema_answers_validate"),
    "prediction": PREDICTION,
    "tools": Planned("tools.chat_tools", TOOLS + "test_required_calls_validate_against_their_schemas"),
    "tool_choice": Planned("tools.read_choice", TOOLS + "test_a_named_tool_choice_calls_that_tool"),
    "parallel_tool_calls": Planned("tools.read_choice", TOOLS + "test_without_parallel_calls_there_is_one_call"),
    "function_call": Planned("tools.deprecated_tools", TOOLS + "test_deprecated_functions_answer_a_function_call"),
    "functions": Planned("tools.deprecated_tools", TOOLS + "test_deprecated_functions_answer_a_function_call"),
    "web_search_options": "this server cannot search the web",
    "service_tier": Planned("api.core.tenancy.openai_ask", TENANCY + "test_tiers_are_reported_in_every_dialect"),
    "prompt_cache_retention": refusals.refused_unless("cached prefixes live while their pages are free",
                                                      "in_memory"),
})

# Fireworks' chat request (the AsyncAPI chat schema), served by the same route
# (api/chat/body.py): the fields it shares with OpenAI's are treated as OpenAI's are.
FIREWORKS_REQUEST = ModelFields(fireworks.ChatCompletionRequest, like=CreateChatCompletionRequest, fields={
    **{name: Sampled() for name in ("top_k", "min_p", "typical_p", "repetition_penalty", "mirostat_target",
                                    "mirostat_lr")},
    "ignore_eos": Stopping(),
    "context_length_exceeded_behavior": Planned(
        "plan.max_tokens_for", CHAT + "test_context_length_exceeded_caps_or_refuses"),
    "reasoning_history": Planned("api.core.reasoning.with_history",
                                 REASONING + "test_reasoning_history_decides_which_reasoning_reaches_the_prompt"),
    "thinking": Planned("api.core.reasoning.fireworks_thinking",
                        REASONING + "test_a_thinking_budget_forces_its_end_phrase_then_the_end_tag"),
    "speculation": PREDICTION,
    "prompt_cache_isolation_key": Planned("api.core.tenancy.openai_ask",
                                          TENANCY + "test_isolation_keys_partition_the_prefix_cache"),
    "prompt_truncate_len": "chat prompts are never truncated: a prompt over the context window is refused",
    "echo_last": "echoing the prompt is not served on chat completions",
    **{name: NO_OP_WHEN_FALSE for name in ("echo", "return_token_ids", "raw_output",
                                           "perf_metrics_in_response", "safe_tokenization")},
})

NON_TEXT_PARTS = [
    ModelFields(part_cls, {"type": Planned("api.core.prompt.part_text",
                                           REFUSALS + "test_non_text_parts_are_refused_by_type"),
                           payload: f"{refusals.TEXT_ONLY}: it cannot take {kind} input"})
    for part_cls, payload, kind in ((ChatCompletionContentPartImage, "image_url", "image"),
                                    (ChatCompletionContentPartInputAudio, "input_audio", "audio"),
                                    (ChatCompletionContentPartFile, "file", "file"))]
TEXT_PART = Planned("api.core.prompt.part_text", CHAT + "test_text_parts_equal_string_content")
REFUSAL_PART = Planned("api.core.prompt.part_text", CHAT + "test_assistant_refusals_render_as_its_text")



READ_TOOL = Planned("tools.read_tool", TOOLS + "test_required_calls_validate_against_their_schemas")
CUSTOM_TOOL = Planned("tools.custom_format", TOOLS + "test_custom_tools_follow_their_grammar")
NAMED = Planned("tools.read_choice", TOOLS + "test_a_named_tool_choice_calls_that_tool")
ALLOWED = Planned("tools.read_choice", TOOLS + "test_allowed_tools_narrow_the_calls")
FUNCTIONS = Planned("tools.deprecated_tools", TOOLS + "test_deprecated_functions_answer_a_function_call")
FORMAT = Planned("api.core.structured.format_grammar", FORMATS + "test_json_schema_answers_validate")
TOOL_TABLES = [
    every_field(ChatCompletionFunctionTool, READ_TOOL),
    ModelFields(FunctionDefinition, {"name": READ_TOOL, "description": READ_TOOL, "parameters": READ_TOOL,
                                     "strict": Planned("tools.read_tool", TOOLS + "test_strict_tools_keep_to_their_schema")}),
    every_field(ChatCompletionCustomTool, CUSTOM_TOOL), every_field(CustomToolDefinition, CUSTOM_TOOL),
    every_field(CustomToolTextFormat, CUSTOM_TOOL), every_field(CustomToolGrammarFormat, CUSTOM_TOOL),
    every_field(CustomToolGrammar, CUSTOM_TOOL),
    every_field(ChatCompletionNamedToolChoice, NAMED), every_field(ChatCompletionNamedToolChoiceFunction, NAMED),
    every_field(ChatCompletionNamedToolChoiceCustom, NAMED),
    every_field(ChatCompletionNamedToolChoiceCustomTool, NAMED),
    every_field(ChatCompletionAllowedToolChoice, ALLOWED), every_field(ChatCompletionAllowedTools, ALLOWED),
    every_field(ChatCompletionFunctions, FUNCTIONS), every_field(ChatCompletionFunctionCallOption, FUNCTIONS),
    every_field(ResponseFormatText, FORMAT), every_field(ResponseFormatJsonObject, FORMAT),
    every_field(ResponseFormatJsonSchema, FORMAT), every_field(JsonSchemaFormat, FORMAT),
    every_field(fireworks.ResponseFormat, FORMAT),
    # Fireworks' chat schema has the same tools and calls (the body reads OpenAI's shapes).
    every_field(fireworks.ChatCompletionTool, READ_TOOL), every_field(fireworks.Function, READ_TOOL),
    every_field(fireworks.ToolCall, HISTORY), every_field(fireworks.Function1, HISTORY),
    ModelFields(fireworks_completions.ResponseFormat, {
        "type": FORMAT, "schema_": FORMAT, "json_schema": FORMAT,
        "grammar": Planned("api.core.structured.format_grammar", FORMATS + "test_a_gbnf_grammar_format_is_followed")}),
    every_field(ChatCompletionMessageFunctionToolCall, HISTORY), every_field(ChatCompletionFunctionCall, HISTORY),
    every_field(ChatCompletionMessageCustomToolCall, HISTORY),
    every_field(ChatCompletionCustomToolCallInput, HISTORY),
]

REGISTRY = Registry([
    *TOOL_TABLES,
    REQUEST,
    FIREWORKS_REQUEST,
    *[ModelFields(message_cls, MESSAGE_FIELDS) for message_cls in (
        ChatCompletionRequestDeveloperMessage, ChatCompletionRequestSystemMessage,
        ChatCompletionRequestUserMessage, ChatCompletionRequestFunctionMessage)],
    ModelFields(ChatCompletionRequestToolMessage, {"role": RENDERED, "content": RENDERED, "tool_call_id": RENDERED}),
    ModelFields(ChatCompletionRequestAssistantMessage, {
        **MESSAGE_FIELDS, "refusal": REFUSAL_PART, "tool_calls": HISTORY,
        "function_call": Planned("plan.prompt_messages", TOOLS + "test_a_deprecated_function_call_renders_as_history"),
        "audio": f"{refusals.TEXT_ONLY}: it has no audio replies to refer to"}),
    # The body's assistant message: OpenAI's, with Fireworks' reasoning_content (api/chat/reasoning.py).
    ModelFields(AssistantMessage, like=ChatCompletionRequestAssistantMessage,
                fields={"reasoning_content": REASONING_CONTENT}),
    ModelFields(ChatCompletionContentPartText, {"type": TEXT_PART, "text": TEXT_PART}),
    ModelFields(ChatCompletionContentPartRefusal, {"type": REFUSAL_PART, "refusal": REFUSAL_PART}),
    *NON_TEXT_PARTS,
    ModelFields(ChatCompletionPredictionContent, {"type": PREDICTION, "content": PREDICTION}),
    ModelFields(ChatCompletionStreamOptions, {
        "include_usage": Planned("render.ChunkWriter", STREAM + "test_include_usage_adds_a_last_usage_chunk"),
        "continuous_usage_stats": Planned("render.ChunkWriter", STREAM + "test_continuous_usage_stats_counts_in_every_chunk"),
        "include_obfuscation": Planned("render.ChunkWriter", STREAM + "test_obfuscation_pads_chunks_unless_turned_off"),
    }),
    ModelFields(fireworks.ChatMessage, {"role": RENDERED, "content": RENDERED, "tool_call_id": RENDERED,
                                        "tool_calls": HISTORY,
                                        "reasoning_content": REASONING_CONTENT}),
    ModelFields(fireworks.ChatMessageContent, {
        "type": TEXT_PART, "text": TEXT_PART,
        **{name: f"{refusals.TEXT_ONLY}: it cannot take {kind} input"
           for name, kind in (("image_url", "image"), ("video_url", "video"), ("audio_url", "audio"))}}),
    ModelFields(UpdateChatCompletionRequest, {
        "metadata": Planned("route.update_chat_completion",
                            STORE + "test_update_replaces_metadata_and_null_clears_it")}),
])
