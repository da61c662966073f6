"""`StructuredOutputsParams`: vLLM's constraint on an offline generation's output (one of a
JSON schema, any JSON object, a regular expression, a choice of strings, or a grammar),
turned into the engine's grammar (engine/text/grammar.py), which llguidance enforces token
by token as it does for the HTTP API's response_format."""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.text.grammar import Grammar


@dataclass(frozen=True)
class StructuredOutputsParams:
    json: dict | str | None = None  # a JSON Schema, as a dict or its text
    json_object: bool = False  # any JSON object
    regex: str | None = None  # Rust-syntax; the whole output matches it
    choice: list[str] | None = None  # the output is one of these strings
    grammar: str | None = None  # llama.cpp's GBNF, or llguidance's Lark with `lark=True`
    lark: bool = False

    def __post_init__(self) -> None:
        given = [name for name in ("json", "json_object", "regex", "choice", "grammar") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("StructuredOutputsParams takes exactly one of json, json_object, regex, choice and "
                             f"grammar; {', '.join(given) or 'none'} given")
        if self.choice is not None and not all(isinstance(text, str) and text for text in self.choice):
            raise ValueError("StructuredOutputsParams.choice lists non-empty strings")

    def grammar_of(self) -> Grammar:
        """The engine's grammar for this constraint."""
        if self.json is not None:
            return Grammar("json_schema", self.json if isinstance(self.json, str) else json.dumps(self.json))
        if self.json_object:
            return Grammar("json_schema", '{"type": "object"}')
        if self.regex is not None:
            return Grammar("regex", self.regex)
        if self.choice is not None:  # Lark's string literals are JSON's
            return Grammar("lark", "start: " + " | ".join(json.dumps(text) for text in self.choice))
        return Grammar("lark" if self.lark else "gbnf", self.grammar)
