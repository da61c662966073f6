"""The requests tools/soak.py sends, and how it judges their answers.

Every dialect, whole and streamed, with n > 1, stop strings, logprobs and the stores
(a chat completion with `store: true`, a stored response, each retrieved by its id after),
and bad bodies that must be refused with a 4xx."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DIALECTS = ("completions", "chat", "responses", "messages")
PROMPT = "Write a short list of colours:"
# Where a stored object is retrieved, by dialect.
RETRIEVE = {"chat": "/v1/chat/completions/{id}", "responses": "/v1/responses/{id}"}


@dataclass(frozen=True)
class Case:
    """One kind of request."""

    name: str  # e.g. "chat stream n=2"
    dialect: str
    path: str
    body: dict[str, Any] | bytes  # bytes: sent as they are (a body that is not JSON)
    stream: bool = False
    bad: bool = False  # a body the server must refuse with a 4xx
    stored: bool = False  # retrieved by its id once answered
    num_choices: int = 1
    extra_headers: dict[str, str] = field(default_factory=dict)


def completions(model: str, max_tokens: int) -> list[Case]:
    def case(name: str, stream: bool = False, n: int = 1, **fields: Any) -> Case:
        body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "stream": stream, "n": n, **fields}
        return Case(f"completions {name}", "completions", "/v1/completions", body, stream, num_choices=n)

    return [case("plain"), case("stream", stream=True), case("n=2", n=2, temperature=0.8, seed=1),
            case("stop", stop=[",", "\n"]), case("logprobs", logprobs=2),
            case("stream n=2 logprobs", stream=True, n=2, temperature=0.8, logprobs=1)]


def chat(model: str, max_tokens: int) -> list[Case]:
    def case(name: str, stream: bool = False, n: int = 1, stored: bool = False, **fields: Any) -> Case:
        body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens":
                max_tokens, "stream": stream, "n": n, **({"store": True} if stored else {}), **fields}
        return Case(f"chat {name}", "chat", "/v1/chat/completions", body, stream, stored=stored, num_choices=n)

    return [case("plain"), case("stream", stream=True), case("n=2", n=2, temperature=0.8),
            case("stop", stop=[","]), case("logprobs", logprobs=True, top_logprobs=2),
            case("stream logprobs", stream=True, logprobs=True, top_logprobs=1), case("store", stored=True)]


def responses(model: str, max_tokens: int) -> list[Case]:
    def case(name: str, stream: bool = False, stored: bool = False, **fields: Any) -> Case:
        body = {"model": model, "input": PROMPT, "max_output_tokens": max_tokens, "stream": stream,
                "store": stored, **fields}
        return Case(f"responses {name}", "responses", "/v1/responses", body, stream, stored=stored)

    return [case("plain"), case("stream", stream=True), case("store", stored=True),
            case("logprobs", include=["message.output_text.logprobs"], top_logprobs=2)]


def messages(model: str, max_tokens: int) -> list[Case]:
    def case(name: str, stream: bool = False, **fields: Any) -> Case:
        body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
                "stream": stream, **fields}
        return Case(f"messages {name}", "messages", "/v1/messages", body, stream)

    return [case("plain"), case("stream", stream=True), case("stop", stop_sequences=[","]),
            case("stream stop", stream=True, stop_sequences=["\n"])]


def bad(model: str) -> list[Case]:
    return [Case("bad: not JSON", "chat", "/v1/chat/completions", b'{"model": "x", "messages": [', bad=True,
                 extra_headers={"content-type": "application/json"}),
            Case("bad: negative max_tokens", "completions", "/v1/completions",
                 {"model": model, "prompt": "x", "max_tokens": -5}, bad=True),
            Case("bad: messages not a list", "messages", "/v1/messages",
                 {"model": model, "messages": "hello", "max_tokens": 5}, bad=True),
            Case("bad: input a number", "responses", "/v1/responses", {"model": model, "input": 5}, bad=True)]


def all_cases(model: str, max_tokens: int) -> list[Case]:
    return [*completions(model, max_tokens), *chat(model, max_tokens), *responses(model, max_tokens),
            *messages(model, max_tokens), *bad(model)]


def whole_problem(case: Case, answer: Any) -> str | None:
    """What is wrong with a whole (non-streamed) answer, or None."""
    if not isinstance(answer, dict):
        return "the answer is not a JSON object"
    if case.dialect in ("completions", "chat"):
        num = len(answer.get("choices") or [])
        return None if num == case.num_choices else f"{num} choices, not {case.num_choices}"
    if case.dialect == "responses":
        return None if answer.get("status") in ("completed", "incomplete") else f"status {answer.get('status')}"
    return None if answer.get("type") == "message" and answer.get("content") is not None else "no message"


def stream_problem(case: Case, lines: list[str]) -> str | None:
    """What is wrong with a stream read to its end (its raw SSE lines), or None: each
    dialect's terminal event must be last, and no error event may come."""
    data = [line[len("data: "):] for line in lines if line.startswith("data: ")]
    events = [line[len("event: "):] for line in lines if line.startswith("event: ")]
    if case.dialect in ("completions", "chat"):
        if not data or data[-1] != "[DONE]":
            return "no [DONE] at the end"
        errors = [item for item in data[:-1] if "error" in json.loads(item)]
        return f"an error event: {errors[0]}" if errors else None
    terminal = {"responses": ("response.completed", "response.incomplete"), "messages": ("message_stop",)}
    if not events or events[-1] not in terminal[case.dialect]:
        return f"ended with {events[-1] if events else 'nothing'}, not {' or '.join(terminal[case.dialect])}"
    return None
