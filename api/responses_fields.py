"""Field registry entries for POST /v1/responses: the request, its input items, their content
parts and the nested option objects. Each handled field names the test that proves it.

Decisions beyond the spec (values that ask for what this server does anyway pass):
- `function_call_output` items render as `tool` messages (their `call_id` as the message's
  `tool_call_id`), so a client that runs tools itself can hand their results to the model;
  `function_call`, `reasoning` and `item_reference` input items are refused;
- `tool_choice`: `none` and `auto` (with no tools there is nothing to call); `tools`: an
  empty list; `truncation`: `disabled` (a prompt too long for the context is a 400);
  `background`: false; `text.format`: `{"type": "text"}`; `text.verbosity`: `medium`;
  `reasoning.effort`: `none`; `service_tier`: `auto` or `default`;
- `include`: only `message.output_text.logprobs`, with `top_logprobs` alternatives;
- the `id`, `status`, `annotations` and `logprobs` of items given back as input are kept
  with the stored input items (listed by GET /v1/responses/{id}/input_items), and do not
  reach the prompt.
"""

from __future__ import annotations

from typing import Any

from api.chat_fields import plain, unless, unless_text_format
from api.registry import Refusal, register, register_like
from generated import fireworks_streaming
from generated.flint import (
    CreateResponseRequest,
    EasyInputMessage,
    FileCitationAnnotation,
    FilePathAnnotation,
    FunctionCallOutputItem,
    FunctionToolCall,
    InputFileContent,
    InputImageContent,
    InputTextContent,
    ItemReference,
    OutputMessage,
    OutputTextContent,
    ReasoningConfig,
    ReasoningItem,
    RefusalContent,
    ResponseLogProb,
    ResponseStreamOptions,
    ResponseTextConfig,
    ResponseTopLogProb,
    UrlCitationAnnotation,
)

BASIC = "tests/api/test_responses.py::"
STREAM = "tests/api/test_responses_stream.py::"
STORED = "tests/api/test_responses_store.py::"
REFUSALS = "tests/api/test_responses_refusals.py::"
RENDERED = BASIC + "test_input_items_render_through_the_chat_template"
KEPT = STORED + "test_input_items_keep_what_the_client_gave"
LATER_TOOLS = "tool calling is not supported yet"
TEXT_ONLY = "this model is text-only"
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def unless_empty(value: Any) -> bool:
    return bool(value)


def unless_logprobs_include(value: Any) -> bool:
    return value is not None and any(plain(item) != LOGPROBS_INCLUDE for item in value)


register(CreateResponseRequest, handled={
    "model": REFUSALS + "test_unknown_model_is_404",
    "input": RENDERED,
    "instructions": BASIC + "test_instructions_become_the_system_message",
    "max_output_tokens": BASIC + "test_max_output_tokens_makes_the_response_incomplete",
    "temperature": BASIC + "test_sampling_fields_reach_the_engine",
    "top_p": BASIC + "test_sampling_fields_reach_the_engine",
    "top_logprobs": BASIC + "test_logprobs_match_the_engine",
    "metadata": STORED + "test_a_stored_response_is_retrieved_as_returned",
    "store": STORED + "test_store_false_keeps_nothing",
    "previous_response_id": STORED + "test_previous_response_id_puts_the_history_in_the_prompt",
    "stream": STREAM + "test_stream_events_arrive_in_order_and_match_the_response",
    "stream_options": STREAM + "test_obfuscation_pads_deltas_unless_turned_off",
    "user": BASIC + "test_the_response_echoes_its_settings",
    "safety_identifier": BASIC + "test_the_response_echoes_its_settings",
    "prompt_cache_key": BASIC + "test_the_response_echoes_its_settings",
    "text": BASIC + "test_the_response_echoes_its_settings",
    "reasoning": BASIC + "test_the_response_echoes_its_settings",
}, refused={
    "include": Refusal(f"only {LOGPROBS_INCLUDE!r} can be included here", applies=unless_logprobs_include),
    "tools": Refusal(LATER_TOOLS, applies=unless_empty),
    "tool_choice": unless("none", "auto"),
    "parallel_tool_calls": LATER_TOOLS,
    "max_tool_calls": LATER_TOOLS,
    "background": Refusal("background responses are not supported", applies=lambda value: value is True),
    "truncation": unless("disabled"),
    "service_tier": unless("auto", "default"),
})
# The AsyncAPI (Fireworks streaming) body of the same route is a subset of OpenAI's.
register_like(fireworks_streaming.ResponseRequest, CreateResponseRequest)

register(ResponseTextConfig, handled={}, refused={
    "format": Refusal("structured output is not supported yet", applies=unless_text_format),
    "verbosity": unless("medium"),
})
register(ReasoningConfig, handled={}, refused={
    "effort": unless("none"),
    "summary": "this model does not reason, so there is nothing to summarise",
    "generate_summary": "this model does not reason, so there is nothing to summarise",
})
register(ResponseStreamOptions, handled={
    "include_obfuscation": STREAM + "test_obfuscation_pads_deltas_unless_turned_off",
})

register(EasyInputMessage, handled={
    "type": RENDERED, "role": RENDERED, "content": RENDERED, "id": KEPT, "status": KEPT,
})
register(OutputMessage, handled={
    "type": RENDERED, "role": RENDERED, "content": RENDERED, "id": KEPT, "status": KEPT,
})
register(FunctionCallOutputItem, handled={
    "type": BASIC + "test_function_call_output_renders_as_a_tool_message",
    "call_id": BASIC + "test_function_call_output_renders_as_a_tool_message",
    "output": BASIC + "test_function_call_output_renders_as_a_tool_message",
    "id": KEPT, "status": KEPT,
})
for item_cls, reason in ((FunctionToolCall, f"function_call input items need tools: {LATER_TOOLS}"),
                         (ReasoningItem, "reasoning input items are not supported: this model does not reason"),
                         (ItemReference, "item references are not supported: continue a stored "
                                         "conversation with `previous_response_id`")):
    register(item_cls, handled={}, refused={name: reason for name in item_cls.model_fields})

register(InputTextContent, handled={"type": RENDERED, "text": RENDERED})
register(OutputTextContent, handled={"type": RENDERED, "text": RENDERED, "annotations": KEPT, "logprobs": KEPT})
register(RefusalContent, handled={"type": RENDERED, "refusal": RENDERED})
register(InputImageContent, handled={"type": REFUSALS + "test_image_and_file_parts_are_refused"},
         refused={name: f"{TEXT_ONLY}: it cannot take image input" for name in ("image_url", "file_id", "detail")})
register(InputFileContent, handled={"type": REFUSALS + "test_image_and_file_parts_are_refused"},
         refused={name: f"{TEXT_ONLY}: it cannot take file input"
                  for name in ("file_id", "filename", "file_data", "file_url")})
# What an earlier answer's output_text part carried, given back: kept, never rendered.
for kept_cls in (ResponseLogProb, ResponseTopLogProb, UrlCitationAnnotation, FileCitationAnnotation,
                 FilePathAnnotation):
    register(kept_cls, handled={name: KEPT for name in kept_cls.model_fields})
