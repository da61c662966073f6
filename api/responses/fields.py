"""The field registry of POST /v1/responses (api/core/registry.py): the request, its input
items, their content parts and the nested option objects.

Decisions beyond the spec (values that ask for what this server does anyway pass):
- `model` may be left out where the server serves one model (no adapter loaded): the
  body is that model's, as with vLLM's and llama.cpp's servers, whose clients and curl
  examples leave it out (api/core/state.py `with_served_model`,
  tests/api/test_model_left_out.py); with several models it stays a 400 naming it;
- function tools (api/responses/tools.py) and `text.format` (api/core/structured.py)
  constrain the answer by grammar; calls come back as `function_call` items
  (api/responses/tool_calls.py); `include` logprobs with tools is a 400;
- `function_call` input items join the assistant message before them as its `tool_calls`,
  and `function_call_output` items render as `tool` messages (their `call_id` as the
  message's `tool_call_id`); a `reasoning` item's text is the `reasoning_content` of the
  assistant output after it (api/responses/input.py), its `encrypted_content` refused (this
  server never makes one); `item_reference` input items are refused;
- `reasoning.effort` sets the thinking budget of a model that reasons (api/core/reasoning.py;
  a model that does not reason refuses every effort but `none`); summaries are not made, so
  `reasoning.summary` is refused; `service_tier` `priority` is the priority tier, every
  other value the default tier, and the response reports the tier that served it;
  `prompt_cache_key` names the session whose pages are kept (api/core/tenancy.py), and is echoed;
  `truncation`: `disabled` (a prompt too long for the context is a 400); `background`:
  false; `text.verbosity`: `medium`;
- `include`: only `message.output_text.logprobs`, with `top_logprobs` alternatives;
- the `id`, `status`, `annotations` and `logprobs` of items given back as input are kept
  with the stored input items (listed by GET /v1/responses/{id}/input_items), and do not
  reach the prompt.
"""

from __future__ import annotations

from api.core import refusals
from api.core.registry import ModelFields, Planned, Refused, Registry, Sampled, every_field
from generated import fireworks_streaming
from generated.flint import (
    CreateResponseRequest,
    EasyInputMessage,
    FileCitationAnnotation,
    FilePathAnnotation,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolCall,
    InputFileContent,
    InputImageContent,
    InputTextContent,
    ItemReference,
    OutputMessage,
    OutputTextContent,
    ReasoningConfig,
    ReasoningItem,
    ReasoningSummaryText,
    ReasoningTextContent,
    RefusalContent,
    ResponseLogProb,
    ResponseStreamOptions,
    ResponseTextConfig,
    ResponseToolChoiceFunction,
    ResponseTopLogProb,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    TextFormatText,
    UrlCitationAnnotation,
)

BASIC = "tests/api/test_responses.py::"
STREAM = "tests/api/test_responses_stream.py::"
STORED = "tests/api/test_responses_store.py::"
REFUSALS = "tests/api/test_responses_refusals.py::"
TOOLS = "tests/api/test_responses_tools.py::"
FORMATS = "tests/api/test_responses_formats.py::"
RENDERED = Planned("input.item_message", BASIC + "test_input_items_render_through_the_chat_template")
KEPT = Planned("input.stored_item", STORED + "test_input_items_keep_what_the_client_gave")
ECHOED = Planned("render.settings_of", BASIC + "test_the_response_echoes_its_settings")
TOOL_OUTPUT = Planned("input.item_message", BASIC + "test_function_call_output_renders_as_a_tool_message")
NON_TEXT = Planned("input.part_text", REFUSALS + "test_image_and_file_parts_are_refused")
READ_TOOL = Planned("tools.read_tool", TOOLS + "test_required_calls_validate_against_their_schemas")
NAMED = Planned("tools.read_choice", TOOLS + "test_a_named_tool_choice_calls_that_tool")
CALL_HISTORY = Planned("input.add_call", TOOLS + "test_function_call_items_render_as_history")
SCHEMA_FORMAT = Planned("api.core.structured.format_grammar", FORMATS + "test_json_schema_answers_validate")
OBJECT_FORMAT = Planned("api.core.structured.format_grammar", FORMATS + "test_json_object_answers_are_objects")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
REASONING = "tests/api/test_responses_reasoning.py::"
REASONING_INPUT = Planned("input.chat_messages", REASONING + "test_reasoning_items_become_the_reasoning_of_the_next_answer")
NO_SUMMARIES = refusals.refused_if_any("reasoning summaries are not generated: a reasoning item carries the reasoning "
                                       "text itself, as its `content`")


def unless_logprobs_include(value) -> bool:
    return value is not None and any(refusals.plain(item) != LOGPROBS_INCLUDE for item in value)


REQUEST = ModelFields(CreateResponseRequest, {
    "model": Planned("api.core.pipeline.generate", REFUSALS + "test_unknown_model_is_404"),
    "input": RENDERED,
    "instructions": Planned("input.chat_messages", BASIC + "test_instructions_become_the_system_message"),
    "max_output_tokens": Planned("plan.sampling_of", BASIC + "test_max_output_tokens_makes_the_response_incomplete"),
    "temperature": Sampled(),
    "top_p": Sampled(),
    "top_logprobs": Planned("plan.logprobs_count", BASIC + "test_logprobs_match_the_engine"),
    "metadata": Planned("store.save_response", STORED + "test_a_stored_response_is_retrieved_as_returned"),
    "store": Planned("render.keep", STORED + "test_store_false_keeps_nothing"),
    "previous_response_id": Planned("store.previous_response",
                                    STORED + "test_previous_response_id_puts_the_history_in_the_prompt"),
    "stream": Planned("api.core.pipeline.generate", STREAM + "test_stream_events_arrive_in_order_and_match_the_response"),
    "stream_options": Planned("plan.plan_response", STREAM + "test_obfuscation_pads_deltas_unless_turned_off"),
    "user": ECHOED,
    "safety_identifier": ECHOED,
    "prompt_cache_key": Planned("api.core.tenancy.openai_ask",
                                "tests/api/test_tenancy_http.py::test_session_ids_keep_their_pages_and_move_the_metrics"),
    "text": ECHOED,
    "reasoning": ECHOED,
    "include": Refused(f"only {LOGPROBS_INCLUDE!r} can be included here", unless_logprobs_include),
    "tools": Planned("tools.response_tools", TOOLS + "test_required_calls_validate_against_their_schemas"),
    "tool_choice": NAMED,
    "parallel_tool_calls": Planned("tools.read_choice", TOOLS + "test_without_parallel_calls_there_is_one_call"),
    "max_tool_calls": Planned("tools.read_choice", TOOLS + "test_max_tool_calls_bounds_the_calls"),
    "background": Refused("background responses are not supported", lambda value: value is True),
    "truncation": refusals.refused_unless("a conversation is never truncated: one that does not fit is refused",
                                          "disabled"),
    "service_tier": Planned("api.core.tenancy.openai_ask",
                            "tests/api/test_tenancy_http.py::test_tiers_are_reported_in_every_dialect"),
})

REGISTRY = Registry([
    REQUEST,
    # The AsyncAPI (Fireworks streaming) body of the same route is a subset of OpenAI's.
    ModelFields(fireworks_streaming.ResponseRequest, like=CreateResponseRequest),
    ModelFields(ResponseTextConfig, {"format": Planned("plan.checked_grammar",
                                                       FORMATS + "test_json_schema_answers_validate"),
                                     "verbosity": refusals.refused_unless("verbosity controls are not supported",
                                                                          "medium")}),
    ModelFields(ReasoningConfig, {
        "effort": Planned("api.core.reasoning.effort_ask",
                          REASONING + "test_reasoning_effort_sets_the_budget_and_the_answer_holds_a_reasoning_item"),
        "summary": NO_SUMMARIES,
        "generate_summary": NO_SUMMARIES}),
    ModelFields(ResponseStreamOptions, {
        "include_obfuscation": Planned("render.ResponseEventWriter", STREAM + "test_obfuscation_pads_deltas_unless_turned_off")}),
    ModelFields(EasyInputMessage, {"type": RENDERED, "role": RENDERED, "content": RENDERED, "id": KEPT, "status": KEPT}),
    ModelFields(OutputMessage, {"type": RENDERED, "role": RENDERED, "content": RENDERED, "id": KEPT, "status": KEPT}),
    ModelFields(FunctionCallOutputItem, {"type": TOOL_OUTPUT, "call_id": TOOL_OUTPUT, "output": TOOL_OUTPUT,
                                         "id": KEPT, "status": KEPT}),
    every_field(TextFormatText, Planned("api.core.structured.format_grammar",
                                        BASIC + "test_the_response_echoes_its_settings")),
    every_field(TextFormatJsonSchema, SCHEMA_FORMAT),
    every_field(TextFormatJsonObject, OBJECT_FORMAT),
    ModelFields(FunctionTool, {"type": READ_TOOL, "name": READ_TOOL, "description": READ_TOOL, "parameters": READ_TOOL,
                               "strict": Planned("tools.read_tool", TOOLS + "test_strict_tools_keep_to_their_schema")}),
    every_field(ResponseToolChoiceFunction, NAMED),
    ModelFields(FunctionToolCall, {"type": CALL_HISTORY, "call_id": CALL_HISTORY, "name": CALL_HISTORY,
                                   "arguments": CALL_HISTORY, "id": KEPT, "status": KEPT}),
    ModelFields(ReasoningItem, {"type": REASONING_INPUT, "summary": REASONING_INPUT, "content": REASONING_INPUT,
                                "id": KEPT, "status": KEPT,
                                "encrypted_content": "encrypted reasoning is never made by this server: give the "
                                                     "reasoning back as its `content`"}),
    every_field(ReasoningTextContent, REASONING_INPUT),
    every_field(ReasoningSummaryText, REASONING_INPUT),
    every_field(ItemReference, "item references are not supported: continue a stored conversation with "
                               "`previous_response_id`"),
    ModelFields(InputTextContent, {"type": RENDERED, "text": RENDERED}),
    ModelFields(OutputTextContent, {"type": RENDERED, "text": RENDERED, "annotations": KEPT, "logprobs": KEPT}),
    ModelFields(RefusalContent, {"type": RENDERED, "refusal": RENDERED}),
    ModelFields(InputImageContent, {"type": NON_TEXT, **{name: f"{refusals.TEXT_ONLY}: it cannot take image input"
                                                          for name in ("image_url", "file_id", "detail")}}),
    ModelFields(InputFileContent, {"type": NON_TEXT, **{name: f"{refusals.TEXT_ONLY}: it cannot take file input"
                                                         for name in ("file_id", "filename", "file_data", "file_url")}}),
    # What an earlier answer's output_text part carried, given back: kept, never rendered.
    *[every_field(kept_cls, KEPT)
      for kept_cls in (ResponseLogProb, ResponseTopLogProb, UrlCitationAnnotation, FileCitationAnnotation,
                       FilePathAnnotation)],
])
