"""The request fields of the `anthropic` SDK (2.12) on the tiny-model app, sent by the SDK
itself: each is in the spec (a schema error would be a 400 for a field the SDK may send),
and is either served (200) or refused with a 400 naming it; `messages.count_tokens` counts
the prompt a message generates from.

The SDK (which sends through httpx2) talks to the in-process app through the module's test
client (an httpx client), bridged by a transport."""

from __future__ import annotations

import typing

import anthropic
import httpx2
import pytest
from anthropic import types as sdk_types
from anthropic.types.message_create_params import MessageCreateParamsBase

from api_helpers import rendered_ids
from generated import flint
from messages_helpers import MODEL_ID, USER_HI, AppTransport

GREEDY = {"temperature": 0}  # the SDK's create() has no sampling arguments any more
HEADERS_ONLY = {"user_profile_id", "workspace_id"}  # create() sends these as headers, not in the body


@pytest.fixture(scope="module")
def sdk(client):
    http_client = httpx2.Client(transport=AppTransport(client))
    with anthropic.Anthropic(base_url=str(client.base_url), api_key="not-needed", http_client=http_client,
                             max_retries=0, timeout=120) as sdk:
        yield sdk


def create(sdk, **fields):
    return sdk.messages.create(model=MODEL_ID, messages=fields.pop("messages", USER_HI), max_tokens=4,
                               extra_body=GREEDY, **fields)


def keys(typed_dict) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def type_tags(annotation) -> set[str]:
    """The `type` literals of the TypedDicts (or models) a union of block params holds."""
    tags = set()
    for member in typing.get_args(annotation) or (annotation,):
        hints = typing.get_type_hints(member, include_extras=True) if isinstance(member, type) else {}
        pending = [hints.get("type")]
        while pending:
            node = pending.pop()
            if typing.get_origin(node) is typing.Literal:
                tags.update(typing.get_args(node))
            elif node is not None:
                pending += typing.get_args(node)
    return tags


def generated_tags(root_model) -> set[str]:
    return type_tags(root_model.model_fields["root"].annotation)


# --- the spec holds every field the SDK's typed params have ---------------------------------

@pytest.mark.parametrize("sdk_params, model", [
    (MessageCreateParamsBase, flint.CreateMessageRequest),
    (sdk_types.MessageCountTokensParams, flint.CountMessageTokensRequest),
    (sdk_types.TextBlockParam, flint.TextBlockParam),
    (sdk_types.ImageBlockParam, flint.ImageBlockParam),
    (sdk_types.DocumentBlockParam, flint.DocumentBlockParam),
    (sdk_types.SearchResultBlockParam, flint.SearchResultBlockParam),
    (sdk_types.ToolUseBlockParam, flint.ToolUseBlockParam),
    (sdk_types.ToolResultBlockParam, flint.ToolResultBlockParam),
    (sdk_types.ServerToolUseBlockParam, flint.ServerToolUseBlockParam),
    (sdk_types.WebSearchToolResultBlockParam, flint.ServerToolResultBlockParam),
    (sdk_types.ContainerUploadBlockParam, flint.ContainerUploadBlockParam),
    (sdk_types.ToolParam, flint.ToolParam),
    (sdk_types.CacheControlEphemeralParam, flint.CacheControlEphemeral),
    (sdk_types.OutputConfigParam, flint.OutputConfig),
    (sdk_types.JSONOutputFormatParam, flint.JsonOutputFormat),
    (sdk_types.ThinkingConfigEnabledParam, flint.ThinkingConfigEnabled),
    (sdk_types.ThinkingConfigAdaptiveParam, flint.ThinkingConfigAdaptive),
    (sdk_types.ContainerParams, flint.MessageContainerParams),
    (sdk_types.DiagnosticsParam, flint.MessageDiagnosticsParam),
    (sdk_types.MetadataParam, flint.MessageRequestMetadata),
], ids=lambda value: getattr(value, "__name__", ""))
def test_the_spec_has_every_field_of_the_sdks_params(sdk_params, model):
    fields = {info.alias or name for name, info in model.model_fields.items()}
    assert keys(sdk_params) - HEADERS_ONLY <= fields


@pytest.mark.parametrize("sdk_union, root_model", [
    (sdk_types.ContentBlockParam, flint.ContentBlockParam),
    (sdk_types.ThinkingConfigParam, flint.ThinkingConfig),
    (sdk_types.ToolChoiceParam, flint.ToolChoice),
    (sdk_types.tool_result_block_param.Content, flint.ToolResultContentBlock),
    (sdk_types.image_block_param.Source, flint.ImageSource),
    (sdk_types.document_block_param.Source, flint.DocumentSource),
], ids=["content-blocks", "thinking", "tool-choice", "tool-result-content", "image-source", "document-source"])
def test_the_spec_has_every_variant_of_the_sdks_unions(sdk_union, root_model):
    assert type_tags(sdk_union) and type_tags(sdk_union) <= generated_tags(root_model)


def test_message_roles_are_the_sdks():
    roles = {typing.get_args(typing.get_type_hints(member)["role"])[0]
             for member in typing.get_args(sdk_types.MessageParam)}
    assert roles == {role.value for role in flint.MessageParamRole}


# --- each field sent by the SDK: served, or refused naming it --------------------------------

LONG_SYSTEM = "You are a lighthouse keeper who answers questions about tides and storms. " * 10


@pytest.mark.parametrize("fields", [
    {"cache_control": {"type": "ephemeral"}},
    {"cache_control": {"type": "ephemeral", "ttl": "5m"}},
    {"system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}]},
    {"service_tier": "auto"},
    {"service_tier": "standard_only"},
    {"speed": "standard"},
    {"inference_geo": "global"},
    {"output_config": {}},
    {"output_config": {"effort": "high"}},
    {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
    {"tools": [{"name": "add", "input_schema": {"type": "object"}, "eager_input_streaming": True,
                "defer_loading": False, "allowed_callers": ["direct"], "cache_control": {"type": "ephemeral"}}],
     "tool_choice": {"type": "none"}},
    {"thinking": {"type": "disabled"}},
    {"metadata": {"user_id": "user-1"}},
    {"container": None, "diagnostics": None, "inference_geo": None, "speed": None, "cache_control": None},
    {"messages": [{"role": "system", "content": "Be brief."}, *USER_HI]},
], ids=lambda fields: ",".join(fields))
def test_accepted_values_are_served(sdk, fields):
    reply = create(sdk, **fields)
    assert reply.type == "message" and reply.content[0].type == "text"
    assert reply.usage.service_tier == "standard"


@pytest.mark.parametrize("fields, param, why", [
    ({"cache_control": {"type": "ephemeral", "ttl": "1h"}}, "cache_control.ttl", "hour"),
    ({"speed": "fast"}, "speed", "fast mode"),
    ({"inference_geo": "us"}, "inference_geo", "region"),
    ({"container": "container_011"}, "container", "hosted tools"),
    ({"container": {"skills": [{"skill_id": "pptx", "type": "anthropic"}]}}, "container", "hosted tools"),
    ({"diagnostics": {"previous_message_id": None}}, "diagnostics", "diagnostics"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "string", "pattern": "(a"}}}},
     "output_config.format.schema", "cannot be used to constrain the output"),
    ({"tools": [{"name": "add", "input_schema": {"type": "object"}, "defer_loading": True}]},
     "tools.[0].defer_loading", "tool search"),
    ({"tools": [{"name": "add", "input_schema": {"type": "object"}, "allowed_callers": ["code_execution_20260120"]}]},
     "tools.[0].allowed_callers", "hosted tools"),
    ({"messages": [*USER_HI, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {},
         "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}}]}]},
     "messages.[1].content.[0].caller", "hosted tools"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
        {"type": "browser_state", "tabs": []}]}]}]}, "messages.[0].content.[0].content.[0]", "browser_state"),
    ({"output_config": {"effort": "low"}}, "output_config.effort", "effort"),
    ({"thinking": {"type": "adaptive"}}, "thinking", "reason"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024, "display": "omitted"}}, "thinking", "omitted"),
    ({"messages": [{"role": "user", "content": [
        {"type": "search_result", "source": "https://x", "title": "X", "content": [{"type": "text", "text": "x"}]}]}]},
     "messages.[0].content.[0]", "search_result"),
    ({"messages": [*USER_HI, {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}]}]},
     "messages.[1].content.[0]", "hosted tools"),
    ({"messages": [*USER_HI, {"role": "assistant", "content": [
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}]}]},
     "messages.[1].content.[0]", "hosted tools"),
    ({"messages": [{"role": "user", "content": [{"type": "container_upload", "file_id": "file_1"}]}]},
     "messages.[0].content.[0]", "hosted tools"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}, "transformations": {}}]}]},
     "messages.[0].content.[0]", "image"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_refused_values_are_400s_naming_the_field(sdk, fields, param, why):
    with pytest.raises(anthropic.BadRequestError) as refused:
        create(sdk, **fields)
    error = refused.value.body["error"]
    assert error["type"] == "invalid_request_error"
    assert f"`{param}" in error["message"] and why in error["message"], error


def test_top_level_cache_control_is_served_by_the_prefix_cache(sdk):
    system = "Top-level breakpoint. " + LONG_SYSTEM
    first = create(sdk, system=system, cache_control={"type": "ephemeral"}).usage
    second = create(sdk, system=system, cache_control={"type": "ephemeral"}).usage
    total = first.input_tokens + first.cache_read_input_tokens
    assert second.input_tokens + second.cache_read_input_tokens == total
    assert second.cache_read_input_tokens >= 3 * 16 and second.input_tokens < first.input_tokens


def test_a_system_turn_renders_where_it_stands(sdk, engine_requests, smollm2_tokenizer):
    conversation = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."},
                    {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
                    {"role": "user", "content": "How are you?"}]
    create(sdk, system="Be brief.", messages=conversation)
    [request] = engine_requests
    assert request.prompt_token_ids == rendered_ids(smollm2_tokenizer, [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi."}, {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "How are you?"}])


# --- messages.count_tokens ---------------------------------------------------------------

def test_count_tokens_counts_the_prompt_a_message_generates_from(sdk, engine_requests):
    fields = {"system": "Be brief.", "messages": [*USER_HI, {"role": "assistant", "content": "Hi"}],
              "cache_control": {"type": "ephemeral"}, "speed": "standard", "thinking": {"type": "disabled"},
              "output_config": {}}
    counted = sdk.messages.count_tokens(model=MODEL_ID, **fields)
    assert isinstance(counted, sdk_types.MessageTokensCount)
    reply = create(sdk, **fields)
    [request] = engine_requests
    assert counted.input_tokens == len(request.prompt_token_ids)
    assert counted.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens


def test_count_tokens_refuses_what_a_message_refuses(sdk):
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.messages.count_tokens(model=MODEL_ID, messages=USER_HI, speed="fast")
    assert "`speed`" in refused.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        sdk.messages.count_tokens(model="claude-opus-9", messages=USER_HI)
    assert unknown.value.body["error"]["type"] == "not_found_error"
