"""Reasoning: a model's thinking section (`<think>` … `</think>`) kept apart from its answer.

A model reasons when its vocabulary has the section's tags as single tokens and its chat
template writes them (Qwen3, DeepSeek-R1 and their kin): `thinking_tags` finds them. A
request that may think carries a `Reasoning`: the tags' ids, whether its prompt already
opened the section (DeepSeek-R1's generation prompt ends in `<think>`, so the output
starts inside it), and a budget of thinking tokens.

Each sequence follows its output through a `ReasoningTrack`:
- the section opens with the start tag as the first output token (forced when the request
  must think), or with the prompt, and closes with the end tag; there is at most one
  section, before the answer;
- the tags' own text never shows; the thoughts' text goes to `RequestOutput.reasoning_text`
  and the rest to `text`, and stop strings and grammars apply to the answer only;
- newlines at the section's edges are dropped (as the templates drop them when the
  reasoning comes back as history): around the thoughts, and before the answer;
- the start tag is banned after the first output token, and from the first when thinking
  is off (budget 0);
- a budget of n: once the thoughts leave room only for the bridge phrase (`budget_end_ids`,
  left out when longer than n), the phrase and then the end tag are forced, one token per
  step, so the thoughts between the tags never exceed n. Budget 0 on an output that starts
  inside the section forces the end tag at once.

The track says how many steps its row's mask stays as it is (`steps_with_fixed_mask`), so
decode windows and drafts never run past a forced token. Host only: plain Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from engine.sampling.masks import allow_token

if TYPE_CHECKING:
    from engine.host.sequence import Sequence

# The section's tags, as chat templates and vocabularies spell them.
THINK_TAGS = (("<think>", "</think>"),)
# The bridge forced before the end tag when a budget runs out and the request names none.
DEFAULT_BUDGET_END = "\n\nMy thinking budget is spent, so I will answer now with what I have.\n"


class Vocabulary(Protocol):
    chat_template: str | None

    def token_to_id(self, token: str) -> int | None: ...


@dataclass(frozen=True)
class ThinkingTags:
    """A model's thinking section: its tags' texts and token ids."""

    start: str
    end: str
    start_id: int
    end_id: int


def thinking_tags(tokenizer: Vocabulary) -> ThinkingTags | None:
    """The tags of the model's thinking section, or None when it does not reason: both must
    be single tokens of its vocabulary (added tokens, special or not) and its chat template
    must write one of them."""
    template = tokenizer.chat_template or ""
    for start, end in THINK_TAGS:
        start_id, end_id = tokenizer.token_to_id(start), tokenizer.token_to_id(end)
        if start_id is not None and end_id is not None and (start in template or end in template):
            return ThinkingTags(start, end, start_id, end_id)
    return None


def opens_section(prompt_ids: list[int], tags: ThinkingTags, decode) -> bool:
    """Whether the prompt ends by opening a thinking section (its start tag, then nothing
    but whitespace), so the output begins inside it. A tag written earlier, inside a
    message, opens nothing. `decode(ids)` is the tokenizer's."""
    for token in reversed(prompt_ids):
        if token == tags.start_id:
            return True
        if token == tags.end_id or decode([token]).strip():
            return False
    return False


@dataclass(frozen=True)
class Reasoning:
    """How a request's output treats the model's thinking section."""

    start_token_id: int
    end_token_id: int
    starts_inside: bool = False  # the prompt opened the section: the output begins thinking
    opens: bool = False  # the output must think: its first token is the start tag, forced
    budget: int | None = None  # most tokens between the tags (None: no bound; 0: no thinking)
    budget_end_ids: tuple[int, ...] = ()  # forced when the budget runs out, before the end tag

    def __post_init__(self) -> None:
        if self.budget is not None and self.budget < 0:
            raise ValueError("a reasoning budget cannot be negative")

    @property
    def forced_tail(self) -> tuple[int, ...]:
        """What is forced once the budget is spent: the bridge, if it fits, then the end tag."""
        fits = self.budget is not None and len(self.budget_end_ids) <= self.budget
        return (*(self.budget_end_ids if fits else ()), self.end_token_id)

    @property
    def free_thoughts(self) -> int | None:
        """Thoughts the model chooses before the tail is forced (None: no bound)."""
        return None if self.budget is None else self.budget - (len(self.forced_tail) - 1)


# What one output token is to the section.
START, THOUGHT, END, ANSWER = "start", "thought", "end", "answer"


class ReasoningTrack:
    """Where one sequence's output stands in its thinking section, and the thoughts' text
    (the output stage owns `detokenizer`; the edges' newlines are trimmed here)."""

    def __init__(self, spec: Reasoning) -> None:
        self.spec = spec
        self.thinking = spec.starts_inside
        self.ended = False  # the section closed: the answer follows
        self.num_tokens = 0  # output tokens of the section, tags included
        self.num_thoughts = 0  # output tokens between the tags (forced ones included)
        self.detokenizer = None  # the thoughts' IncrementalDetokenizer, set by the output stage
        self.thoughts = EdgeTrim()
        self.answer = EdgeTrim(hold_trailing=False)

    def advance(self, token: int) -> str:
        """Take the next output token; what it is to the section (START, THOUGHT, END, ANSWER)."""
        if self.thinking:
            self.num_tokens += 1
            if token == self.spec.end_token_id:
                self.thinking, self.ended = False, True
                return END
            self.num_thoughts += 1
            return THOUGHT
        if token == self.spec.start_token_id and not self.ended:
            self.thinking = True
            self.num_tokens += 1
            return START
        return ANSWER

    def shows(self, token: int) -> bool:
        """Whether an answer token has text to show: a tag's never does."""
        return token not in (self.spec.start_token_id, self.spec.end_token_id)

    def may_open(self, num_output_tokens: int) -> bool:
        """Whether the next token may open the section: only as the output's first, when
        thinking is allowed."""
        return num_output_tokens == 0 and not self.thinking and not self.ended and self.spec.budget != 0

    def forced_token(self, num_output_tokens: int) -> int | None:
        """The token forced next, if any: the start tag of an output that must think, or
        what a spent budget forces."""
        if self.spec.opens and self.may_open(num_output_tokens):
            return self.spec.start_token_id
        free = self.spec.free_thoughts
        if not self.thinking or free is None or self.num_thoughts < free:
            return None
        return self.spec.forced_tail[min(self.num_thoughts - free, len(self.spec.forced_tail) - 1)]

    def banned(self, num_output_tokens: int) -> frozenset[int]:
        return frozenset() if self.may_open(num_output_tokens) else frozenset((self.spec.start_token_id,))

    def steps_with_fixed_mask(self, num_output_tokens: int) -> int | None:
        """How many more tokens may be drawn under the mask of the next one (None: no bound)."""
        if self.may_open(num_output_tokens) or self.forced_token(num_output_tokens) is not None:
            return 0
        free = self.spec.free_thoughts
        return free - self.num_thoughts if self.thinking and free is not None else None

    def answer_text(self, text: str) -> str:
        """Answer text as shown: after a section, its leading newlines dropped."""
        return self.answer.feed(text) if self.ended else text


class EdgeTrim:
    """Text arriving in pieces, with its leading newlines dropped and (`hold_trailing`) its
    trailing newlines held back until more text follows (what is held when the text ends
    is dropped)."""

    def __init__(self, hold_trailing: bool = True) -> None:
        self.hold_trailing = hold_trailing
        self.started = False
        self.held = ""

    def feed(self, text: str) -> str:
        if not self.started:
            text = text.lstrip("\n")
            if not text:
                return ""
            self.started = True
        if not self.hold_trailing:
            return text
        body = text.rstrip("\n")
        if not body:
            self.held += text
            return ""
        shown, self.held = self.held + body, text[len(body):]
        return shown


# The engine's hooks, each a line where it is used.

def is_thinking(seq: Sequence) -> bool:
    return seq.reasoning is not None and seq.reasoning.thinking


def forced_token(seq: Sequence) -> int | None:
    """The token the sequence's thinking budget makes it draw next (None: any)."""
    return None if seq.reasoning is None else seq.reasoning.forced_token(seq.num_output_tokens)


def banned_tokens(seq: Sequence) -> frozenset[int]:
    """The tags the sequence may not draw next."""
    return frozenset() if seq.reasoning is None else seq.reasoning.banned(seq.num_output_tokens)


def steps_with_fixed_mask(seq: Sequence) -> int | None:
    """How many tokens the sequence may draw before reasoning changes its mask (None: no bound)."""
    return None if seq.reasoning is None else seq.reasoning.steps_with_fixed_mask(seq.num_output_tokens)


def answer_words(seq: Sequence, take):
    """The grammar's packed mask for the sequence's next token (`take(seq)`), or None: no
    grammar, or the grammar waits while the model thinks. A first token that may open the
    section may also be the start tag."""
    if seq.matcher is None or is_thinking(seq):
        return None
    words = take(seq)
    if seq.reasoning is not None and seq.reasoning.may_open(seq.num_output_tokens):
        words = allow_token(words, seq.reasoning.spec.start_token_id)
    return words


def answer_tokens(spec: Reasoning | None, token_ids: list[int]) -> list[int]:
    """The tokens of an output that belong to the answer (what a grammar must accept)."""
    if spec is None:
        return list(token_ids)
    track = ReasoningTrack(spec)
    return [token for token in token_ids if track.advance(token) == ANSWER]
