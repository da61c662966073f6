"""Field registry entries for POST /v1/chat/completions: the request (OpenAI's, and the
Fireworks chat fields OpenAI lacks), its messages, their content parts and stream_options.
Each handled field names the test that proves it.

Decisions beyond the spec (the values that ask for what this server does anyway pass):
- `verbosity`: only `medium`, the spec's default, which asks for nothing in particular;
- `service_tier`: `auto` and `default` (the one tier this server has; reported as
  `default` in every response); flex, scale and priority are refused;
- `prompt_cache_retention`: `in_memory` (the prefix cache); `24h` is refused;
- `tool_choice` / `function_call`: `none` (no tool is ever called); `reasoning_effort`:
  `none`; `modalities`: `["text"]`; `response_format`: `{"type": "text"}`;
- `store: true` keeps the completion (api/chat_store.py); `metadata` is stored with it.
"""

from __future__ import annotations

from typing import Any

from api.registry import Refusal, register, register_like
from generated import fireworks_streaming as fireworks
from generated.openai_chat_completions import (
    ChatCompletionContentPartFile,
    ChatCompletionContentPartImage,
    ChatCompletionContentPartInputAudio,
    ChatCompletionContentPartRefusal,
    ChatCompletionContentPartText,
    ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestDeveloperMessage,
    ChatCompletionRequestFunctionMessage,
    ChatCompletionRequestSystemMessage,
    ChatCompletionRequestToolMessage,
    ChatCompletionRequestUserMessage,
    ChatCompletionStreamOptions,
    CreateChatCompletionRequest,
)

CHAT = "tests/api/test_chat.py::"
STREAM = "tests/api/test_chat_stream.py::"
REFUSALS = "tests/api/test_chat_refusals.py::"
RENDERED = CHAT + "test_every_role_renders_through_the_chat_template"
LATER_TOOLS = "tool calling is not supported yet"
TEXT_ONLY = "this model is text-only"


def plain(value: Any) -> Any:
    """A field value as JSON data (the registry hands refusal checks model instances)."""
    value = getattr(value, "root", value)
    if isinstance(value, list):
        return [plain(item) for item in value]
    return getattr(value, "value", value)  # an enum member: its string


def unless(*accepted: Any) -> Refusal:
    """A refusal for every given value but the accepted ones (which change nothing)."""
    reason = f"only {' or '.join(map(repr, accepted))} can be honoured here"
    return Refusal(reason, applies=lambda value: value is not None and plain(value) not in accepted)


def unless_text_format(value: Any) -> bool:
    return value is not None and plain(value).type != "text"


register(CreateChatCompletionRequest, handled={
    "messages": RENDERED,
    "model": REFUSALS + "test_unknown_model_is_404",
    "max_completion_tokens": CHAT + "test_max_completion_tokens_limits_the_reply",
    "max_tokens": CHAT + "test_deprecated_max_tokens_limits_the_reply",
    "n": CHAT + "test_n_choices_with_a_seed_differ_and_repeat",
    "seed": CHAT + "test_n_choices_with_a_seed_differ_and_repeat",
    "stop": CHAT + "test_stop_strings_cut_the_reply",
    "temperature": CHAT + "test_sampling_fields_reach_the_engine",
    "top_p": CHAT + "test_sampling_fields_reach_the_engine",
    "frequency_penalty": CHAT + "test_sampling_fields_reach_the_engine",
    "presence_penalty": CHAT + "test_sampling_fields_reach_the_engine",
    "logit_bias": CHAT + "test_logit_bias_forces_a_token",
    "logprobs": CHAT + "test_logprobs_content_matches_the_engine",
    "top_logprobs": CHAT + "test_logprobs_content_matches_the_engine",
    "stream": STREAM + "test_stream_chunks_arrive_in_order_and_match_the_reply",
    "stream_options": STREAM + "test_include_usage_adds_a_last_usage_chunk",
    "metadata": CHAT + "test_caller_fields_are_logged",
    "user": CHAT + "test_caller_fields_are_logged",
    "safety_identifier": CHAT + "test_caller_fields_are_logged",
    "prompt_cache_key": CHAT + "test_caller_fields_are_logged",
    "store": "tests/api/test_store_chat.py::test_stored_completion_is_retrieved_as_returned",
}, refused={
    "modalities": unless(["text"]),
    "audio": f"{TEXT_ONLY}: it cannot speak",
    "reasoning_effort": unless("none"),
    "verbosity": unless("medium"),
    "response_format": Refusal("structured output is not supported yet", applies=unless_text_format),
    "prediction": "predicted outputs are not supported yet",
    "tools": LATER_TOOLS,
    "tool_choice": unless("none"),
    "parallel_tool_calls": LATER_TOOLS,
    "function_call": unless("none"),
    "functions": LATER_TOOLS,
    "web_search_options": "this server cannot search the web",
    "service_tier": unless("auto", "default"),
    "prompt_cache_retention": unless("in_memory"),
})

# Every message's fields reach the template (api/chat_messages.py); names and tool call
# ids stay on the message for templates that use them.
MESSAGE_FIELDS = {"role": RENDERED, "content": RENDERED, "name": RENDERED}
for message_cls in (ChatCompletionRequestDeveloperMessage, ChatCompletionRequestSystemMessage,
                    ChatCompletionRequestUserMessage):
    register(message_cls, handled=MESSAGE_FIELDS)
register(ChatCompletionRequestFunctionMessage, handled=MESSAGE_FIELDS)
register(ChatCompletionRequestToolMessage, handled={
    "role": RENDERED, "content": RENDERED, "tool_call_id": RENDERED,
})
register(ChatCompletionRequestAssistantMessage, handled={
    **MESSAGE_FIELDS, "refusal": CHAT + "test_assistant_refusals_render_as_its_text",
}, refused={
    "tool_calls": LATER_TOOLS,
    "function_call": LATER_TOOLS,
    "audio": f"{TEXT_ONLY}: it has no audio replies to refer to",
})

register(ChatCompletionContentPartText, handled={
    "type": CHAT + "test_text_parts_equal_string_content",
    "text": CHAT + "test_text_parts_equal_string_content",
})
register(ChatCompletionContentPartRefusal, handled={
    "type": CHAT + "test_assistant_refusals_render_as_its_text",
    "refusal": CHAT + "test_assistant_refusals_render_as_its_text",
})
for part_cls, payload, kind in ((ChatCompletionContentPartImage, "image_url", "image"),
                                (ChatCompletionContentPartInputAudio, "input_audio", "audio"),
                                (ChatCompletionContentPartFile, "file", "file")):
    register(part_cls, handled={"type": REFUSALS + "test_non_text_parts_are_refused_by_type"},
             refused={payload: f"{TEXT_ONLY}: it cannot take {kind} input"})

register(ChatCompletionStreamOptions, handled={
    "include_usage": STREAM + "test_include_usage_adds_a_last_usage_chunk",
    "include_obfuscation": STREAM + "test_obfuscation_pads_chunks_unless_turned_off",
})

# Fireworks' chat request (the AsyncAPI chat schema), served by the same route
# (api/chat_body.py): the fields it shares with OpenAI's are treated as OpenAI's are.
register_like(fireworks.ChatCompletionRequest, CreateChatCompletionRequest)
FIREWORKS_SAMPLING = CHAT + "test_fireworks_sampling_fields_reach_the_engine"
NO_OP_WHEN_FALSE = Refusal("this extension is not served on chat completions; false changes nothing",
                           applies=bool)
register(fireworks.ChatCompletionRequest, handled={
    **{name: FIREWORKS_SAMPLING for name in ("top_k", "min_p", "typical_p", "repetition_penalty",
                                              "mirostat_target", "mirostat_lr", "ignore_eos")},
    "context_length_exceeded_behavior": CHAT + "test_context_length_exceeded_caps_or_refuses",
}, refused={
    "reasoning_history": "reasoning controls are not supported yet",
    "thinking": "reasoning controls are not supported yet",
    "speculation": "speculative decoding is not supported yet",
    "prompt_cache_isolation_key": "the prefix cache is shared by all requests and cannot be partitioned by key",
    "prompt_truncate_len": "chat prompts are never truncated: a prompt over the context window is refused",
    "echo_last": "echoing the prompt is not served on chat completions",
    **{name: NO_OP_WHEN_FALSE for name in ("echo", "return_token_ids", "raw_output",
                                           "perf_metrics_in_response", "safe_tokenization")},
})
register(fireworks.ChatMessage, handled={"role": RENDERED, "content": RENDERED, "tool_call_id": RENDERED},
         refused={"tool_calls": LATER_TOOLS, "reasoning_content": "reasoning is not supported yet"})
register(fireworks.ChatMessageContent, handled={
    "type": CHAT + "test_text_parts_equal_string_content",
    "text": CHAT + "test_text_parts_equal_string_content",
}, refused={
    "image_url": f"{TEXT_ONLY}: it cannot take image input",
    "video_url": f"{TEXT_ONLY}: it cannot take video input",
    "audio_url": f"{TEXT_ONLY}: it cannot take audio input",
})
