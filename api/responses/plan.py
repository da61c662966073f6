"""A Responses API request body to the engine request of its one answer.

The conversation (a stored predecessor's turns, then the instructions and this input) and
the tools (api/responses/tools.py) become prompt ids through the chat template
(api/core/prompt.py), and the sampling fields one SamplingParams. `text.format` or the
tools make the grammar the answer is constrained by (api/core/structured.py,
api/core/tool_grammar.py). `reasoning.effort` sets how long a model that reasons may think
(api/core/reasoning.py). `max_output_tokens` is an upper bound, thinking included: the
answer also stops at the end of the context window.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from api.core import limits
from api.core.errors import invalid
from api.core.generation import ChoiceRequest
from api.core.reasoning import effort_ask
from api.core.reasoning_prompt import ReasoningPlan, plan_reasoning
from api.core.sampling import check_count, choice_seed_list, engine_values
from api.core.state import ServerState
from api.core.store import StoredResponse
from api.core.structured import check_grammar, check_tool_grammars, format_grammar
from api.core.tool_format import ToolFormat
from api.core.tool_grammar import calls_or_format
from api.core.turn import plan_turn
from api.responses.body import MODELS
from api.responses.fields import LOGPROBS_INCLUDE, REGISTRY
from api.responses.input import Item, chat_messages, request_items
from api.responses.store import conversation_of, previous_response
from api.responses.tools import SCHEMA_PATH, ResponseTools, response_tools
from engine.sampling.params import MAX_LOGPROBS
from engine.text.grammar import Grammar
from generated.flint import CreateResponseRequest

log = logging.getLogger("flint")

# Accepted and only logged: they identify the caller, and this server bills nobody.
LOGGED_FIELDS = ("user", "safety_identifier", "prompt_cache_key")


@dataclass(frozen=True)
class ResponsePlan:
    """What the answer needs besides the generated text."""

    request: CreateResponseRequest
    body: dict[str, Any]  # the request as given (JSON), for the store
    history: list[Item]  # the stored conversation this one continues, oldest first
    input_items: list[Item]  # this request's input as stored items
    choices: list[ChoiceRequest]  # the one answer
    logprobs: bool  # output_text parts carry logprobs
    timeout: float | None = None
    tools: ResponseTools | None = None  # the answer may hold calls, in `tool_format`
    tool_format: ToolFormat | None = None
    reasoning: ReasoningPlan = ReasoningPlan()  # the answer's thinking is a reasoning item

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)

    @property
    def choice(self) -> ChoiceRequest:
        return self.choices[0]

    @property
    def include_obfuscation(self) -> bool:
        options = self.request.stream_options
        return options is None or options.include_obfuscation is not False


async def plan_response(request: CreateResponseRequest, server: ServerState) -> ResponsePlan:
    """The engine request and answer options of a parsed request."""
    if request.stream_options is not None and not request.stream:
        raise invalid("stream_options", "`stream_options` is only allowed with `stream: true`")
    previous = await previous_response(server, request.previous_response_id)
    given = await asyncio.to_thread(read_request, request, previous)
    log_caller(given.fields)
    tools = given.tools
    reasoning = plan_reasoning(server.tokenizer, effort_ask(request.reasoning.effort if request.reasoning else None,
                                                            "reasoning.effort"))

    async def grammar_of(tool_format: ToolFormat | None) -> Grammar | None:
        return await checked_grammar(server, request, tools, tool_format)

    turn = await plan_turn(server, given.messages, reasoning, grammar_of, tools=tools.tools if tools else None,
                           answers_with_calls=tools is not None, param="input")
    choice = ChoiceRequest(index=0, prompt_index=0, prompt_token_ids=turn.prompt_ids, grammar=turn.grammar,
                           reasoning=turn.thinking,
                           **sampling_of(request, server, server.max_model_len - len(turn.prompt_ids)))
    logprobs = choice.sampling.logprobs is not None
    if logprobs and tools is not None:
        raise invalid("include", f"`{LOGPROBS_INCLUDE}` cannot be combined with tools: an answer's tokens "
                                 "may hold both text and calls")
    return ResponsePlan(request=request, body=given.fields, history=given.history, input_items=given.items,
                        choices=[choice], logprobs=logprobs, tools=tools, tool_format=turn.tool_format,
                        reasoning=turn.reasoning)


@dataclass(frozen=True)
class GivenRequest:
    """What planning reads out of the whole request."""

    fields: dict[str, Any]  # the request as given (JSON), for the store
    history: list[Item]  # the stored conversation this one continues, oldest first
    items: list[Item]  # this request's input as stored items
    tools: ResponseTools | None
    messages: list[Item]  # the conversation the template renders


def read_request(request: CreateResponseRequest, previous: StoredResponse | None) -> GivenRequest:
    """The request read, in a worker thread: an input of as many items as the body limit
    allows takes seconds to copy and number, and the event loop serves everyone else."""
    fields = request.model_dump(mode="json", by_alias=True, exclude_unset=True)
    history = conversation_of(previous) if previous is not None else []
    items = request_items(request)
    tools = response_tools(request)
    return GivenRequest(fields, history, items, tools, chat_messages(request.instructions, history, items))


async def checked_grammar(server: ServerState, request: CreateResponseRequest, tools: ResponseTools | None,
                          tool_format: ToolFormat | None) -> Grammar | None:
    """The answer's grammar, compiled before admission: a bad text format or tool schema is
    a 400 naming its field."""
    text_format, where = format_grammar(request.text.format if request.text else None, "text.format")
    await check_grammar(server, text_format, where)
    if tools is None:
        return text_format
    await check_tool_grammars(server, list(tools.given), SCHEMA_PATH)
    grammar = answer_grammar(text_format, tools, tool_format)
    await check_grammar(server, grammar, "tools")
    return grammar


def answer_grammar(text_format: Grammar | None, tools: ResponseTools, tool_format: ToolFormat) -> Grammar:
    """The grammar of an answer that may call tools; under auto, one with a JSON text format
    is either that JSON or calls."""
    return calls_or_format(tools.tools, tools.choice, tool_format, text_format, "text.format")


def sampling_of(request: CreateResponseRequest, server: ServerState, room: int) -> dict[str, Any]:
    """SamplingParams (with a seed of its own: the Responses API takes none) and StopCriteria."""
    values = engine_values(REGISTRY, MODELS, request.__dict__, request.model_fields_set, server.tokenizer.vocab_size)
    limit = room if request.max_output_tokens is None else check_count("max_output_tokens", request.max_output_tokens)
    [seed] = choice_seed_list(None, 1)
    return {"sampling": values.sampling_params(logprobs=logprobs_count(request), seed=seed),
            "stop": values.stop_criteria(max_tokens=min(limit, room))}


def logprobs_count(request: CreateResponseRequest) -> int | None:
    """Alternatives per token when the output's logprobs are included, else None."""
    limits.check_list("include", request.include, limits.MAX_INCLUDE)
    included = any(item.value == LOGPROBS_INCLUDE for item in request.include or [])
    if request.top_logprobs is not None:
        check_count("top_logprobs", request.top_logprobs, MAX_LOGPROBS)
        if not included:
            raise invalid("top_logprobs", f"`top_logprobs` needs `include: [\"{LOGPROBS_INCLUDE}\"]`")
    return (request.top_logprobs or 0) if included else None


def log_caller(fields: dict[str, Any]) -> None:
    given = {name: fields[name] for name in LOGGED_FIELDS if fields.get(name) is not None}
    if given:
        log.info("response for %.500s", given)  # cut: a field as long as the body is not logged whole
