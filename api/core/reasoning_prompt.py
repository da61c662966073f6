"""A request's reasoning on the served model: what its prompt and its engine request get.

- The template's switch: a template that reads `enable_thinking` (Qwen3) gets it when the
  request asks for thinking or against it; with it off, Qwen3 writes an empty section itself.
- History: `reasoning_content` of earlier assistant messages reaches the template as asked
  by `reasoning_history`: `disabled` drops it everywhere, `interleaved` up to and including
  the last user message, `preserved` keeps it all, and none given leaves it to the template
  (Qwen3's keeps only the reasoning after the last user message). A mode given explicitly
  must be honoured: reasoning it keeps that the template leaves out of the prompt is a 400
  naming the field (Qwen3's template cannot preserve reasoning before the last user turn).
- The engine request (engine/text/reasoning.py): the model's tags, whether the prompt opened the
  section (DeepSeek-R1's generation prompt does), the budget (0 for no thinking: a section
  the prompt opened is closed at once, and the start tag is banned), the bridge phrase's
  tokens, and whether the output must open the section itself (thinking asked explicitly).
  A prompt that ends in an assistant prefill outside the section has begun the answer: its
  output does not think.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.core.errors import invalid
from api.core.reasoning import NOTHING_ASKED, ReasoningAsk, not_reasoning
from engine.text.reasoning import DEFAULT_BUDGET_END, Reasoning, ThinkingTags, opens_section
from engine.text.tokenizer import Tokenizer

SWITCH = "enable_thinking"  # the template variable Qwen3's template reads


@dataclass(frozen=True)
class ReasoningPlan:
    """A request's ask, on a model that reasons (`tags`) or not (None)."""

    ask: ReasoningAsk = NOTHING_ASKED
    tags: ThinkingTags | None = None

    @property
    def reasons(self) -> bool:
        return self.tags is not None

    def template_variables(self, template: str) -> dict[str, Any]:
        """The template's thinking switch, when it has one and the request chose."""
        if self.tags is None or self.ask.think is None or SWITCH not in template:
            return {}
        return {SWITCH: self.ask.think}

    def history_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages with the reasoning the history mode drops taken out."""
        if self.ask.history is None:
            return messages
        keep_after = last_user_index(messages) if self.ask.history == "interleaved" else -1
        return [message if keeps(self.ask.history, index, keep_after) else without_reasoning(message)
                for index, message in enumerate(messages)]

    def check_rendered(self, messages: Sequence[Mapping[str, Any]], text: str) -> None:
        """400 when the rendered prompt leaves out reasoning that the explicit mode keeps."""
        if self.ask.history not in ("interleaved", "preserved"):
            return
        for message in messages:
            reasoning = (message.get("reasoning_content") or "").strip("\n")
            if reasoning and reasoning not in text:
                field = self.ask.history_field
                raise invalid(field, f"`{field}` asks for `{self.ask.history}` reasoning, but the model's chat "
                                     "template leaves the reasoning of an earlier turn out of the prompt")

    def engine_reasoning(self, prompt_ids: list[int], tokenizer: Tokenizer, prefilled: bool = False
                         ) -> Reasoning | None:
        """The engine's view of the request (None: the model does not reason)."""
        tags = self.tags
        if tags is None:
            return None
        inside = opens_section(prompt_ids, tags, tokenizer.decode)
        budget = 0 if self.ask.think is False or (prefilled and not inside) else self.ask.budget
        phrase = DEFAULT_BUDGET_END if self.ask.budget_end is None else self.ask.budget_end
        bridge = tuple(tokenizer.encode_plain(phrase)) if budget else ()
        return Reasoning(tags.start_id, tags.end_id, starts_inside=inside, budget=budget, budget_end_ids=bridge,
                         opens=self.ask.think is True and budget != 0)


def plan_reasoning(tokenizer: Tokenizer, ask: ReasoningAsk) -> ReasoningPlan:
    """`ask` on the served model: a 400 naming the field when it asks a model that does not
    reason for reasoning (thinking, or earlier reasoning kept in the prompt)."""
    tags = tokenizer.thinking
    if tags is None:
        if ask.think:
            raise not_reasoning(ask.field)
        if ask.history in ("interleaved", "preserved"):
            raise not_reasoning(ask.history_field)
    elif ask.budget_end is not None and (tags.start in ask.budget_end or tags.end in ask.budget_end):
        raise invalid("thinking.budget_end_str", "`thinking.budget_end_str` must not hold the thinking tags: "
                                                 "the end tag is forced after it")
    return ReasoningPlan(ask, tags)


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int:
    return max((index for index, message in enumerate(messages) if message.get("role") == "user"), default=-1)


def keeps(mode: str, index: int, keep_after: int) -> bool:
    return mode == "preserved" or (mode == "interleaved" and index > keep_after)


def without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "reasoning_content"}
