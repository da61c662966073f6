"""An Anthropic Messages body (POST /v1/messages) to the engine request of its one reply.

The conversation and the tools (api/messages/tools.py) become prompt ids through the
model's chat template, the way chat completions render theirs (api/core/prompt.py), in one
function, `prepare`, that POST /v1/messages/count_tokens counts with too (`prompt_ids`,
api/messages/count.py), so a count refuses what a message refuses:
- `system`, a string or text blocks, becomes a leading system message;
- a `system` turn inside `messages` is a system message where it stands;
- a message's text blocks are joined by newlines, as chat content parts are;
- an assistant's `tool_use` blocks are its `tool_calls` (the input as JSON arguments), and
  a user's `tool_result` blocks are `tool` messages before its text (a result's text blocks
  joined by newlines; `is_error: true` prefixes it with "Error: "), in the chat shape that
  api/core/tool_prompt.py renders;
- an assistant's `thinking` blocks, their signatures checked, are its `reasoning_content`
  (api/messages/thinking.py);
- a last assistant message is a prefill, as Anthropic defines it: the reply continues
  that text (which the response does not repeat), so its text follows the generation
  prompt instead of being rendered as a finished turn. It cannot hold tool calls, nor come
  with thinking enabled (as Anthropic's API refuses it); outside a thinking section the
  reply does not think.
`thinking` sets whether and how long a model that reasons thinks (api/core/reasoning.py).
The tools (unless `tool_choice` is none) and `output_config.format` make the grammar of
the reply (api/core/structured.py, api/core/tool_grammar.py); under `auto` a JSON format
and tools combine as in chat: the reply is either that JSON or calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from api.core import limits
from api.core.errors import ApiError, invalid
from api.core.generation import ChoiceRequest
from api.core.prompt import PART_SEPARATOR
from api.core.reasoning import anthropic_ask, check_budget_below
from api.core.reasoning_prompt import ReasoningPlan, plan_reasoning
from api.core.sampling import check_count, choice_seed_list, engine_values
from api.core.state import ServerState
from api.core.structured import check_grammar, check_tool_grammars, format_grammar
from api.core.tool_format import ToolFormat
from api.core.tool_grammar import calls_or_format
from api.core.turn import Turn, plan_turn
from api.messages.body import MODELS, MessagesBody
from api.messages.fields import REGISTRY
from api.messages.thinking import checked_thinking, signing_key
from api.messages.tools import SCHEMA_PATH, MessagesTools, messages_tools
from engine.text.grammar import Grammar
from generated.flint import (
    CountMessageTokensRequest,
    TextBlockParam,
    ThinkingBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

# The bodies whose conversation makes a prompt: a message's, and a token count's.
PromptBody = MessagesBody | CountMessageTokensRequest
FORMAT = "output_config.format"

log = logging.getLogger("flint")


@dataclass(frozen=True)
class MessagesPlan:
    """The reply to generate, and how to send it."""

    choices: list[ChoiceRequest]
    stream: bool
    timeout: float | None = None
    tool_format: ToolFormat | None = None  # the reply may hold calls, written so
    reasoning: ReasoningPlan = ReasoningPlan()  # the reply's thinking is a thinking block
    signing_key: bytes = b""  # what signs its thinking (api/messages/thinking.py)


async def plan_messages(body: MessagesBody, server: ServerState) -> MessagesPlan:
    """The engine request of the reply to `body`."""
    if body.metadata is not None and body.metadata.user_id is not None:
        log.info("message for user_id %r", body.metadata.user_id)
    prepared = await prepare(body, server)
    values = engine_values(REGISTRY, MODELS, body.__dict__, body.model_fields_set, server.tokenizer.vocab_size)
    [seed] = choice_seed_list(None, 1)  # Anthropic has no seed field: each reply draws its own
    choice = ChoiceRequest(
        index=0, prompt_index=0, prompt_token_ids=prepared.prompt_ids, sampling=values.sampling_params(seed=seed),
        stop=values.stop_criteria(strings=stop_sequences(body), max_tokens=check_count("max_tokens", body.max_tokens)),
        grammar=prepared.grammar, reasoning=prepared.thinking)
    return MessagesPlan(choices=[choice], stream=bool(body.stream), tool_format=prepared.tool_format,
                        reasoning=prepared.reasoning, signing_key=signing_key(server.settings.data_dir))


async def prompt_ids(body: PromptBody, server: ServerState) -> list[int]:
    """The prompt token ids of `body`'s reply: what POST /v1/messages generates from and
    POST /v1/messages/count_tokens counts (a 400 when the template refuses the
    conversation, its prompt cannot fit, or the tools or output format cannot be served)."""
    return (await prepare(body, server)).prompt_ids


async def prepare(body: PromptBody, server: ServerState) -> Turn:
    """The prompt of `body` with its tools, and the grammar of its reply (each checked)."""
    reasoning = plan_reasoning(server.tokenizer, anthropic_ask(body.thinking))
    if isinstance(body, MessagesBody):  # a token count has no max_tokens
        check_budget_below(reasoning.ask, body.max_tokens)
    tools, conversation, prefill = await asyncio.to_thread(read_body, body, server.settings.data_dir)
    if prefill and reasoning.ask.think:
        raise invalid("thinking", "thinking cannot be enabled when the final message is an assistant prefill: "
                                  "the reply would begin with the prefill, not with thinking")
    answering = tools if tools is not None and tools.answered else None

    async def grammar_of(tool_format: ToolFormat | None) -> Grammar | None:
        if tools is not None:
            await check_tool_grammars(server, list(tools.given), SCHEMA_PATH)
        grammar, grammar_field = answer_grammar(body, answering, tool_format)
        await check_grammar(server, grammar, grammar_field)
        return grammar

    return await plan_turn(server, conversation, reasoning, grammar_of, tools=list(tools.given) if tools else None,
                           answers_with_calls=answering is not None, prefill=prefill)


def read_body(body: PromptBody, data_dir: str) -> tuple[MessagesTools | None, list[dict[str, Any]], str]:
    """The tools, the conversation and its prefill (template_conversation). In a worker
    thread: as many messages, blocks or tools as the body limit allows take seconds to read
    and check, and the event loop serves everyone else."""
    tools = messages_tools(body)
    conversation, prefill = template_conversation(body, signing_key(data_dir))
    return tools, conversation, prefill


def answer_grammar(body: PromptBody, tools: MessagesTools | None,
                   tool_format: ToolFormat | None) -> tuple[Grammar | None, str]:
    """The grammar of the reply, and the field it comes from: the output format's, or the
    tools' (which under auto may answer in the output format's JSON instead)."""
    output_format = body.output_config.format if body.output_config is not None else None
    text_format, where = format_grammar(output_format, FORMAT)
    if tools is None:
        return text_format, where
    return calls_or_format(list(tools.callable), tools.choice, tool_format, text_format, FORMAT), "tools"


def template_conversation(body: PromptBody, key: bytes) -> tuple[list[dict[str, Any]], str]:
    """The messages in the chat shape the template takes, and the final assistant prefill
    (`key` checks the signatures of thinking blocks)."""
    if not body.messages:
        raise invalid("messages", "`messages` must hold at least one message")
    conversation = []
    system = blocks_text(body.system)
    if system:
        conversation.append({"role": "system", "content": system})
    for index, message in enumerate(body.messages):
        conversation += turns(message, index, key)
    prefill = ""
    last = len(body.messages) - 1
    if body.messages[-1].role.value == "assistant":
        if conversation[-1].get("tool_calls"):
            raise invalid(f"messages.[{last}].content", "the final assistant message (a prefill) cannot hold "
                                                        "tool_use blocks: send their results in a user message")
        if conversation[-1].get("reasoning_content"):
            raise invalid(f"messages.[{last}].content", "the final assistant message (a prefill) cannot hold "
                                                        "thinking blocks: the reply continues its text")
        prefill = conversation.pop()["content"]
        if prefill != prefill.rstrip():  # as Anthropic: the model would continue after the space
            raise ApiError(400, "the final assistant message (a prefill) must not end with whitespace",
                           param=f"messages.[{last}].content")
    return conversation, prefill


def turns(message: Any, index: int, key: bytes) -> list[dict[str, Any]]:
    """A message as chat messages: its tool results (each a `tool` message), then its text,
    calls and thinking (none when it holds only results)."""
    role = message.role.value
    if isinstance(message.content, str):
        return [{"role": role, "content": message.content}]
    blocks = [getattr(block, "root", block) for block in message.content]
    for position, block in enumerate(blocks):
        check_block(block, role, f"messages.[{index}].content.[{position}]")
    results = [tool_message(block) for block in blocks if isinstance(block, ToolResultBlockParam)]
    turn: dict[str, Any] = {"role": role, "content": PART_SEPARATOR.join(
        block.text for block in blocks if isinstance(block, TextBlockParam))}
    calls = [history_call(block) for block in blocks if isinstance(block, ToolUseBlockParam)]
    if calls:
        turn["tool_calls"] = calls
    thinking = [checked_thinking(key, block, f"messages.[{index}].content.[{position}]")
                for position, block in enumerate(blocks) if isinstance(block, ThinkingBlockParam)]
    if thinking:
        turn["reasoning_content"] = PART_SEPARATOR.join(thinking)
    return [*results, turn] if turn["content"] or not results else results


def check_block(block: Any, role: str, path: str) -> None:
    """Text anywhere, calls from the assistant, results from the user: the registry has
    refused every other block type before this runs."""
    if isinstance(block, ToolUseBlockParam) and role != "assistant":
        raise invalid(path, "tool_use blocks belong in assistant messages")
    if isinstance(block, ToolResultBlockParam) and role != "user":
        raise invalid(path, "tool_result blocks belong in user messages")
    if isinstance(block, ThinkingBlockParam) and role != "assistant":
        raise invalid(path, "thinking blocks belong in assistant messages")
    if not isinstance(block, (TextBlockParam, ToolUseBlockParam, ToolResultBlockParam, ThinkingBlockParam)):
        raise invalid(path, "only text, thinking, tool_use and tool_result blocks can be read by this text-only "
                            "model")


def history_call(block: ToolUseBlockParam) -> dict[str, Any]:
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": json.dumps(block.input)}}


def tool_message(block: ToolResultBlockParam) -> dict[str, Any]:
    text = blocks_text(block.content)
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": f"Error: {text}" if block.is_error else text}


def blocks_text(content: str | list | None) -> str:
    """A string, or text blocks joined by newlines as chat text parts are. The registry has
    refused every other block type before this runs."""
    if content is None or isinstance(content, str):
        return content or ""
    blocks = [getattr(block, "root", block) for block in content]
    if not all(isinstance(block, TextBlockParam) for block in blocks):
        raise invalid("messages", "only text blocks can be read by this text-only model")
    return PART_SEPARATOR.join(block.text for block in blocks)


def stop_sequences(body: MessagesBody) -> tuple[str, ...]:
    return limits.check_strings("stop_sequences", tuple(body.stop_sequences or ()), limits.MAX_STOP_SEQUENCES)
