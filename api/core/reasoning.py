"""Every dialect's reasoning controls, read into one `ReasoningAsk`.

| control | asks |
| --- | --- |
| `reasoning_effort` / `reasoning.effort` `none`, `false` | no thinking |
| `minimal`, `low`, `medium`, `high`, `xhigh` | thinking, with the budget of EFFORT_BUDGETS |
| `max` | thinking, no budget |
| `true` | thinking at `medium` (Fireworks normalises `true` to `medium`) |
| an integer n (n >= 1) | thinking, at most n tokens |
| `thinking: {"type": "disabled"}` | no thinking |
| `thinking: {"type": "enabled"}` | thinking at `medium`; `budget_tokens` n (>= 1024): at most n tokens |
| Fireworks' `thinking.budget_end_str` | the phrase forced when the budget runs out ("": none) |
| Fireworks' `thinking.keep: "all"` | `reasoning_history: "preserved"` |
| Anthropic's `thinking: {"type": "adaptive"}` | thinking, no budget: the model decides |
| nothing | the chat template's default (Qwen3 and DeepSeek-R1 think) |

A budget counts the tokens between the tags; when it is spent the engine forces the phrase
and the end tag (engine/text/reasoning.py). `reasoning_history` decides which earlier assistant
turns' reasoning reaches the chat template (api/core/reasoning_prompt.py). Asking for
thinking from a model that does not reason is a 400 naming the field; asking for none
passes everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from api.core import limits
from api.core.errors import ApiError, invalid
from api.core.refusals import NOT_REASONING, plain

# Thinking tokens per effort level (None: no bound).
EFFORT_BUDGETS: dict[str, int | None] = {
    "none": 0, "minimal": 512, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768, "max": None}
ENABLED_EFFORT = "medium"  # what `true` and a thinking config without a budget ask for
MIN_BUDGET_TOKENS = 1024  # thinking.budget_tokens' floor, in Fireworks' and Anthropic's specs
HISTORY_MODES = ("disabled", "interleaved", "preserved")


@dataclass(frozen=True)
class ReasoningAsk:
    """What a request asks of reasoning, whatever its dialect's spelling."""

    field: str | None = None  # the field that asked for or against thinking (None: nothing asked)
    think: bool | None = None  # thinking on, off, or as the chat template does by default
    budget: int | None = None  # most thinking tokens (None: no bound)
    budget_end: str | None = None  # forced when the budget runs out (None: the built-in phrase)
    history: str | None = None  # which earlier reasoning reaches the prompt (None: the template's way)
    history_field: str | None = None


NOTHING_ASKED = ReasoningAsk()


def effort_ask(value: Any, field: str) -> ReasoningAsk:
    """`reasoning_effort` (or `reasoning.effort`) in any of its forms: a level, a bool, a budget."""
    value = plain(value)
    if value is None:
        return NOTHING_ASKED
    if isinstance(value, bool):
        return effort_ask(ENABLED_EFFORT if value else "none", field)
    if isinstance(value, int):
        if value < 1:
            raise invalid(field, f"`{field}` as a token budget must be a positive integer, got {value}")
        return ReasoningAsk(field, True, value)
    if value not in EFFORT_BUDGETS:
        raise invalid(field, f"`{field}` must be one of {', '.join(EFFORT_BUDGETS)}, true, false or a token budget")
    budget = EFFORT_BUDGETS[value]
    return ReasoningAsk(field, budget != 0, budget)


def fireworks_ask(effort: Any, thinking: Any, history: Any) -> ReasoningAsk:
    """Fireworks' three controls (chat and completions): `reasoning_effort` or `thinking`
    (both: a 400 naming `thinking`), and `reasoning_history`."""
    if plain(effort) is not None and thinking is not None:
        raise invalid("thinking", "`thinking` cannot be combined with `reasoning_effort`: give one of them")
    ask = effort_ask(effort, "reasoning_effort") if thinking is None else fireworks_thinking(thinking)
    return with_history(ask, plain(history), "reasoning_history")


def fireworks_thinking(thinking: Any) -> ReasoningAsk:
    """Fireworks' `thinking` object: disabled, or enabled with `budget_tokens`, `keep`, `budget_end_str`."""
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        raise invalid("thinking", '`thinking` must be {"type": "enabled", ...} or {"type": "disabled"}')
    allowed = {"type"} | ({"budget_tokens", "keep", "budget_end_str"} if thinking["type"] == "enabled" else set())
    unknown = sorted(set(thinking) - allowed)
    if unknown:
        raise invalid(f"thinking.{unknown[0]}", f"`thinking.{unknown[0]}` is not a field of a {thinking['type']} "
                                                "thinking config")
    if thinking["type"] == "disabled":
        return ReasoningAsk("thinking", False, 0)
    ask = replace(enabled_ask(thinking.get("budget_tokens"), "thinking"),
                  budget_end=bridge_phrase(thinking.get("budget_end_str")))
    keep = thinking.get("keep")
    if keep is not None and keep != "all":
        raise invalid("thinking.keep", '`thinking.keep` can only be "all"')
    return with_history(ask, "preserved" if keep == "all" else None, "thinking.keep")


def enabled_ask(budget_tokens: Any, field: str) -> ReasoningAsk:
    """Thinking enabled, with `budget_tokens` (at least MIN_BUDGET_TOKENS) or at ENABLED_EFFORT."""
    if budget_tokens is None:
        return ReasoningAsk(field, True, EFFORT_BUDGETS[ENABLED_EFFORT])
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < MIN_BUDGET_TOKENS:
        raise invalid(f"{field}.budget_tokens", f"`{field}.budget_tokens` must be an integer of at least "
                                                f"{MIN_BUDGET_TOKENS}")
    return ReasoningAsk(field, True, budget_tokens)


def bridge_phrase(value: Any) -> str | None:
    """`budget_end_str`, a string. Enabled thinking always has a budget (`budget_tokens`, or
    ENABLED_EFFORT's), so the phrase always has one to end."""
    if value is not None and not isinstance(value, str):
        raise invalid("thinking.budget_end_str", "`thinking.budget_end_str` must be a string")
    if value is not None and len(value) > limits.MAX_BUDGET_END_CHARS:  # else megabytes are encoded on the loop
        raise invalid("thinking.budget_end_str", f"`thinking.budget_end_str` may be at most "
                                                 f"{limits.MAX_BUDGET_END_CHARS} characters long")
    return value


def with_history(ask: ReasoningAsk, history: str | None, field: str) -> ReasoningAsk:
    """`ask` with a reasoning_history mode; two fields asking for different modes is a 400."""
    if history is None:
        return ask
    if history not in HISTORY_MODES:
        raise invalid(field, f"`{field}` must be one of {', '.join(HISTORY_MODES)}")
    if ask.history is not None and ask.history != history:
        raise invalid(field, f"`{field}` asks for `{history}` history, but `{ask.history_field}` for `{ask.history}`")
    return replace(ask, history=history, history_field=field)


def anthropic_ask(thinking: Any) -> ReasoningAsk:
    """Anthropic's `thinking` (a ThinkingConfig): disabled, enabled with a budget, or
    adaptive (the model decides how long to think)."""
    config = plain(thinking)
    kind = getattr(config, "type", None)
    if kind is None:
        return NOTHING_ASKED
    if kind == "disabled":
        return ReasoningAsk("thinking", False, 0)
    if kind == "adaptive":
        return ReasoningAsk("thinking", True, None)
    return ReasoningAsk("thinking", True, config.budget_tokens)


def check_budget_below(ask: ReasoningAsk, max_tokens: int) -> None:
    """Anthropic's rule: `thinking.budget_tokens` below `max_tokens`, which counts the thinking too."""
    if ask.field == "thinking" and ask.budget is not None and ask.budget >= max_tokens:
        raise invalid("thinking.budget_tokens", f"`thinking.budget_tokens` ({ask.budget}) must be less than "
                                                f"`max_tokens` ({max_tokens}), which counts the thinking too")


def not_reasoning(field: str) -> ApiError:
    return invalid(field, f"`{field}` asks for reasoning, but {NOT_REASONING}: its chat template has no "
                          "thinking section")
