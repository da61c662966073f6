"""One chat turn's planning, shared by the chat, Responses and Messages dialects.

Each dialect reads its own fields into a conversation, its tools and a reasoning plan
(api/core/reasoning_prompt.py `plan_reasoning`, whose refusals come first); from there the
steps are the same, in this order: the prompt ids through the chat template, the tool-call
format the answer may use, the answer's grammar (compiled before admission, so a bad one
is a 400 naming its field), and the engine's view of the reply's thinking section.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from api.core.prompt import chat_prompt_ids
from api.core.reasoning_prompt import ReasoningPlan
from api.core.state import ServerState
from api.core.tool_format import ToolFormat
from api.core.tool_prompt import answer_format
from engine.text.grammar import Grammar
from engine.text.reasoning import Reasoning

# The answer's grammar for the tool-call format (None: the answer calls no tool), checked.
GrammarOf = Callable[[ToolFormat | None], Awaitable[Grammar | None]]


@dataclass(frozen=True)
class Turn:
    """A turn's prompt, and what its reply is constrained by."""

    prompt_ids: list[int]
    grammar: Grammar | None
    tool_format: ToolFormat | None
    reasoning: ReasoningPlan
    thinking: Reasoning | None  # the engine's view of the reply's thinking section


async def plan_turn(server: ServerState, messages: list[Any], reasoning: ReasoningPlan, grammar_of: GrammarOf, *,
                    tools: list[Any] | None = None, answers_with_calls: bool = False, param: str = "messages",
                    prefill: str = "") -> Turn:
    """The turn of `messages` with `tools` in the prompt; the answer may call them where
    `answers_with_calls`; `param` names the conversation in errors, `prefill` is the
    reply's given start."""
    prompt_ids = await chat_prompt_ids(server, messages, param=param, prefill=prefill, tools=tools,
                                       reasoning=reasoning)
    tool_format = answer_format(server.tokenizer.chat_template) if answers_with_calls else None
    grammar = await grammar_of(tool_format)
    thinking = reasoning.engine_reasoning(prompt_ids, server.tokenizer, prefilled=bool(prefill))
    return Turn(prompt_ids, grammar, tool_format, reasoning, thinking)
