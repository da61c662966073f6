"""Structured output: a request's grammar, compiled by llguidance, one matcher per sequence.

A `Grammar` is what the API asks for (a JSON schema, a regular expression, a Lark or GBNF
grammar); `GrammarCompiler` turns it into an llguidance matcher over this model's
vocabulary. Compiling is the costly part (up to a second for a large schema), so compiled
grammars are kept by their text and every sequence gets a copy of the compiled one. The
matcher then follows the sequence's output token by token (engine/host/output.py), and before
each step yields the packed mask of the tokens that keep the output valid
(engine/host/grammar_masks.py), which the sampler applies like any other allowed-token mask.

JSON is written compactly with one space after `:` and `,` (as Python's json.dumps does):
with llguidance's flexible whitespace a model sampled at high temperature may pad an
answer with newlines until its token limit, and the answer would never close.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import llguidance

from engine.text.tokenizer import Tokenizer

GRAMMAR_KINDS = ("json_schema", "regex", "lark", "gbnf", "llguidance")
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
COMPILED_GRAMMARS_KEPT = 256


class GrammarError(ValueError):
    """A grammar llguidance cannot compile; the message is llguidance's."""


@dataclass(frozen=True)
class Grammar:
    """A constraint on a request's output: its text in one of GRAMMAR_KINDS.

    `json_schema` is a JSON Schema document (as a JSON string); `regex` a Rust-syntax regular
    expression the whole output must match; `lark` llguidance's Lark dialect (which can embed
    JSON schemas with `%json`); `gbnf` llama.cpp's grammar format; `llguidance` a grammar
    already in llguidance's JSON form (several Lark grammars referring to each other)."""

    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in GRAMMAR_KINDS:
            raise ValueError(f"grammar kind must be one of {GRAMMAR_KINDS}, not {self.kind!r}")


def llguidance_source(grammar: Grammar) -> str:
    """`grammar` in llguidance's own grammar format (raises GrammarError on malformed text)."""
    try:
        if grammar.kind == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(grammar.text, defaults=JSON_LAYOUT)
        if grammar.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(grammar.text)
        if grammar.kind == "lark":
            return llguidance.LLMatcher.grammar_from_lark(grammar.text)
        if grammar.kind == "llguidance":
            return grammar.text
        return llguidance.grammar_from("gbnf", grammar.text)
    except ValueError as error:
        raise GrammarError(str(error)) from None


class GrammarCompiler:
    """Compiles grammars for one tokenizer and vocabulary, keeping the most recent ones.

    Safe from any thread: compiling releases the GIL, and a compiled matcher is only read
    (copied) once cached."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Iterable[int]) -> None:
        self.vocab_size = vocab_size
        self._source = tokenizer
        self._eos_token_ids = sorted(eos_token_ids)
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self._compiled = functools.lru_cache(maxsize=COMPILED_GRAMMARS_KEPT)(self._compile)

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of the vocabulary, built at its first use: a fifth of a second
        once, and 37 MiB (the tokenizer again, and its slices for masks) that a server whose
        requests never constrain their output need not hold."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llguidance.LLTokenizer(self._source.to_json_str(), n_vocab=self.vocab_size,
                                                         eos_token=self._eos_token_ids)
            return self._tokenizer

    def matcher(self, grammar: Grammar) -> llguidance.LLMatcher:
        """A fresh matcher for `grammar`, at the start of the output (GrammarError if invalid)."""
        return self._compiled(grammar).deep_copy()

    def check(self, grammar: Grammar) -> None:
        """Raise GrammarError unless `grammar` compiles (and keep it compiled)."""
        self._compiled(grammar)

    def _compile(self, grammar: Grammar) -> llguidance.LLMatcher:
        matcher = llguidance.LLMatcher(self.tokenizer, llguidance_source(grammar), log_level=0)
        if matcher.is_error():
            raise GrammarError(matcher.get_error())
        return matcher


def accepts_prefix(matcher: llguidance.LLMatcher, token_ids: list[int]) -> bool:
    """Whether `matcher` (left unchanged) accepts `token_ids` as the output's first tokens."""
    trial = matcher.deep_copy()
    return trial.try_consume_tokens(token_ids) == len(token_ids)
