"""Reasoning on /v1/completions: Fireworks' `reasoning_effort` and `thinking` over a raw prompt.

A completion's prompt is text the client wrote, not messages through a chat template, so:
- without a reasoning control the output is the model's raw text, a thinking section and
  its tags included, as any text completion;
- with one (api/core/reasoning.py reads it, as for chat), the served model must reason (a
  400 naming the field otherwise, unless it asks for none) and the output's thinking is
  split off: a prompt ending in the start tag begins inside it, thinking asked for opens it
  (the tag is forced), none asked for closes or bans it, and a budget forces its end
  (engine/text/reasoning.py). The choice then carries `reasoning_content` (null when there was no
  thinking), a stream chunk's choice the piece of it that chunk adds, and the usage
  `completion_tokens_details.reasoning_tokens`: Flint's extension of seed 000's shapes,
  which have no place for them (chat's field names);
- `reasoning_history` and `thinking.keep` choose which earlier turns' reasoning a chat
  template renders; a completion has no turns, so `disabled` asks for nothing and keeping
  any (`interleaved`, `preserved`, `keep: "all"`) is a 400 naming the field.
Beam search takes no reasoning control (api/completions/beams.py checks first).
"""

from __future__ import annotations

from typing import Any

from api.core.errors import invalid
from api.core.reasoning import fireworks_ask
from api.core.reasoning_prompt import ReasoningPlan, plan_reasoning
from api.core.state import ServerState

NO_HISTORY = "a completion's prompt has no earlier turns whose reasoning it could keep or drop"


def completion_reasoning(body: Any, server: ServerState) -> ReasoningPlan | None:
    """The request's reasoning plan, or None when no control asks for or against thinking
    (raw text)."""
    thinking = None if body.thinking is None else plain_thinking(body.thinking)
    ask = fireworks_ask(body.reasoning_effort, thinking, body.reasoning_history)
    if ask.field is not None and body.num_beams not in (None, 1):
        raise invalid(ask.field, f"`{ask.field}` is not supported with beam search")
    plan = plan_reasoning(server.tokenizer, ask)  # a 400 for asking a model that does not reason
    if ask.history in ("interleaved", "preserved"):
        raise invalid(ask.history_field, f"`{ask.history_field}` is for chat: {NO_HISTORY}")
    return plan if ask.field is not None else None


def plain_thinking(thinking: Any) -> dict[str, Any]:
    """The `thinking` config as plain JSON (a generated model or a dict), unset fields left out."""
    thinking = getattr(thinking, "root", thinking)
    if isinstance(thinking, dict):
        return thinking
    return thinking.model_dump(mode="json", exclude_unset=True)


def splits(plan: ReasoningPlan | None) -> bool:
    """Whether the answer carries its thinking apart: a control was given and the model reasons."""
    return plan is not None and plan.reasons


def add_to_choice(choice: dict[str, Any], reasoning_text: str, whole: bool) -> None:
    """A choice (whole: `reasoning_content`, null for none; a stream chunk's: only when it has some)."""
    if whole or reasoning_text:
        choice["reasoning_content"] = reasoning_text or None


def add_to_usage(usage: dict[str, Any], num_reasoning_tokens: int) -> None:
    usage["completion_tokens_details"] = {"reasoning_tokens": num_reasoning_tokens}
