"""A parsed chat completion body (api/chat/body.py) to the engine requests of its choices.

The messages (and the tools, api/chat/tools.py) become prompt ids through the chat template
(api/core/prompt.py), and the sampling fields one SamplingParams per choice, each with its
own seed. A response format or tools make the grammar every choice is constrained by
(api/core/structured.py, api/core/tool_grammar.py); the reasoning controls decide the
template's thinking switch, the history's reasoning and each choice's thinking section
(api/core/reasoning.py, reasoning_prompt.py). With no token
limit, or one past the context window, the reply stops at the window's end (finish_reason
"length"); Fireworks' `context_length_exceeded_behavior: "error"` refuses such a request
instead.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

from api.chat.body import MODELS, ChatCompletionBody
from api.chat.fields import REGISTRY
from api.chat.tools import ChatTools, chat_tools
from api.core import limits
from api.core.errors import ApiError, invalid
from api.core.generation import ChoiceRequest
from api.core.prediction import prediction_token_ids
from api.core.reasoning import fireworks_ask
from api.core.reasoning_prompt import ReasoningPlan, plan_reasoning
from api.core.sampling import (
    EngineValues,
    check_range,
    choice_seed_list,
    engine_values,
    logit_bias,
    logprobs_count,
    resolve_max_tokens,
)
from api.core.state import ServerState
from api.core.structured import check_grammar, check_tool_grammars, format_grammar
from api.core.tool_format import ToolFormat
from api.core.tool_grammar import calls_or_format
from api.core.turn import plan_turn
from engine.host.request import SamplingParams
from engine.text.grammar import Grammar

log = logging.getLogger("flint")

# Accepted and only logged: they identify the caller, and this server bills nobody.
LOGGED_FIELDS = ("user", "safety_identifier", "prompt_cache_key", "metadata")
# Where a tool's schema and a custom tool's grammar are, for `tools` and deprecated `functions`.
TOOL_GRAMMAR_PATHS = {False: ("tools.[{index}].function.parameters", "tools.[{index}].custom.format.grammar.definition"),
                      True: ("functions.[{index}].parameters", "")}


@dataclass(frozen=True)
class ChatPlan:
    """What the answer needs besides the generated text."""

    body: ChatCompletionBody
    raw: dict[str, Any]  # the request as given (JSON), for the store
    choices: list[ChoiceRequest]
    stream: bool
    include_usage: bool
    # vLLM's stream_options.continuous_usage_stats: usage, so far, in every chunk too.
    continuous_usage: bool
    include_obfuscation: bool
    logprobs: bool
    timeout: float | None = None
    tools: ChatTools | None = None  # the answer may hold calls, in `tool_format`
    tool_format: ToolFormat | None = None
    reasoning: ReasoningPlan = ReasoningPlan()  # the answer carries reasoning_content when the model reasons


async def plan_chat(body: ChatCompletionBody, server: ServerState) -> ChatPlan:
    """The engine requests (one per choice) and answer options of a parsed request."""
    fields, messages, tools = await asyncio.to_thread(read_request, body)
    log_caller(fields)
    stream_options = fields.get("stream_options") or {}
    if stream_options and not body.stream:
        raise invalid("stream_options", "`stream_options` is only allowed with `stream: true`")
    n = 1 if body.n is None else int(check_range("n", body.n, 1, limits.MAX_CHOICES, integer=True))
    if tools is not None and body.stream and any(tool.custom for tool in tools.tools):
        raise invalid("stream", "custom tool calls cannot be streamed: the chunk schema has no shape for them")
    async def grammar_of(tool_format: ToolFormat | None) -> Grammar | None:
        if tools is not None:
            await check_tool_grammars(server, list(tools.given), *TOOL_GRAMMAR_PATHS[tools.deprecated_functions])
        grammar, grammar_field = answer_grammar(fields, tools, tool_format)
        await check_grammar(server, grammar, grammar_field)
        return grammar

    reasoning = plan_reasoning(server.tokenizer, fireworks_ask(fields.get("reasoning_effort"), fields.get("thinking"),
                                                               fields.get("reasoning_history")))
    turn = await plan_turn(server, messages, reasoning, grammar_of, tools=tools.tools if tools else None,
                           answers_with_calls=tools is not None)
    prompt_ids = turn.prompt_ids
    vocab_size = server.tokenizer.vocab_size
    values = engine_values(REGISTRY, MODELS, body.__dict__, body.model_fields_set, vocab_size)
    max_tokens = max_tokens_for(fields, len(prompt_ids), server.max_model_len)
    sampling = sampling_of(fields, values, vocab_size)
    stop = values.stop_criteria(strings=stop_strings(body), max_tokens=max_tokens)
    prediction = await prediction_token_ids(body, server)
    continuous_usage = bool(stream_options.get("continuous_usage_stats"))
    choices = [ChoiceRequest(index=i, prompt_index=0, prompt_token_ids=prompt_ids, sampling=replace(sampling, seed=seed),
                             stop=stop, grammar=turn.grammar, prediction=prediction, reasoning=turn.thinking)
               for i, seed in enumerate(choice_seed_list(body.seed, n))]
    return ChatPlan(body=body, raw=fields, choices=choices, stream=bool(body.stream),
                    include_usage=bool(stream_options.get("include_usage") or continuous_usage),
                    continuous_usage=continuous_usage,
                    include_obfuscation=stream_options.get("include_obfuscation") is not False,
                    logprobs=bool(body.logprobs), tools=tools, tool_format=turn.tool_format, reasoning=turn.reasoning)


def read_request(body: ChatCompletionBody) -> tuple[dict[str, Any], list[dict[str, Any]], ChatTools | None]:
    """The request as given (JSON data), the conversation the template renders, and the
    tools. In a worker thread: a conversation or tool list as long as the body limit allows
    takes a second or more to copy and read, and the event loop serves everyone else."""
    fields = body.model_dump(mode="json", by_alias=True, exclude_unset=True)  # no deprecation warnings
    return fields, prompt_messages(fields), chat_tools(fields)


def answer_grammar(fields: dict[str, Any], tools: ChatTools | None,
                   tool_format: ToolFormat | None) -> tuple[Grammar | None, str]:
    """The grammar of the answer, and the field it comes from: the response format's, or
    the tools' (which under auto may answer in the response format's JSON instead)."""
    text_format, where = format_grammar(fields.get("response_format"), "response_format")
    if tools is None:
        return text_format, where
    return calls_or_format(tools.tools, tools.choice, tool_format, text_format, "response_format"), "tools"


def prompt_messages(fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation the template renders: every message, as given, but a deprecated
    assistant `function_call` as the one call of `tool_calls`."""
    return [with_tool_call(message) if message.get("function_call") else message for message in fields["messages"]]


def with_tool_call(message: dict[str, Any]) -> dict[str, Any]:
    call = {"id": "", "type": "function", "function": message["function_call"]}
    return {**{key: value for key, value in message.items() if key != "function_call"}, "tool_calls": [call]}


def sampling_of(fields: dict[str, Any], values: EngineValues, vocab_size: int) -> SamplingParams:
    """The planned sampling fields: logit bias and logprobs, on top of the plain ones."""
    return values.sampling_params(logit_bias=logit_bias(fields.get("logit_bias"), vocab_size),
                                  logprobs=logprobs_count(fields.get("logprobs"), fields.get("top_logprobs")))


def max_tokens_for(fields: dict[str, Any], num_prompt_tokens: int, max_model_len: int) -> int:
    """The reply's token limit: the one given, else the rest of the context window (a limit
    past the window is lowered to it, or refused with `context_length_exceeded_behavior: error`)."""
    room = max_model_len - num_prompt_tokens
    max_tokens = resolve_max_tokens(fields.get("max_tokens"), fields.get("max_completion_tokens"))
    if max_tokens is None:
        return room
    if max_tokens > room and fields.get("context_length_exceeded_behavior") == "error":
        raise ApiError(400, f"the prompt's {num_prompt_tokens} tokens and up to {max_tokens} generated "
                            f"ones exceed the context window of {max_model_len}",
                       param="context_length_exceeded_behavior", code="context_length_exceeded")
    return min(max_tokens, room)


def stop_strings(body: ChatCompletionBody) -> tuple[str, ...]:
    """`stop` as a tuple: one string, or a list of up to 4."""
    if body.stop is None:
        return ()
    stop = body.stop.root
    stops = (stop,) if isinstance(stop, str) else tuple(stop.root)
    return limits.check_strings("stop", stops, limits.MAX_STOP_STRINGS)


def log_caller(fields: dict[str, Any]) -> None:
    given = {name: fields[name] for name in LOGGED_FIELDS if fields.get(name) is not None}
    if given:
        log.info("chat completion for %.500s", given)  # cut: a field as long as the body is not logged whole
