"""Replies from a running Flint (or any OpenAI-compatible) server: POST /v1/chat/completions
with `stream: true`, read as server-sent events. Closing the stream, as a Ctrl-C does, makes
the server abort the generation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from api.terminal.session import ChatSession
from api.terminal.transport import ChatError, Delta

# A reply may wait long for its first token (a queue, a long prompt): no read timeout, since
# Ctrl-C ends the wait. Connecting should be quick.
TIMEOUT = httpx.Timeout(None, connect=10.0)


class RemoteChat:
    """The chat's transport to the server at `url`, as `model` (None: the server's first model)."""

    def __init__(self, url: str, api_key: str | None = None, model: str | None = None) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")  # an OpenAI-style base URL names the same server
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)
        self.model = model

    def describe(self) -> str:
        try:
            return f"{self.model_id()} at {self.url}"
        except ChatError as error:  # the chat starts anyway: the server may come up later
            return f"{self.url} ({error})"

    def model_id(self) -> str:
        """The model asked for, else the server's first, looked up once it answers."""
        if self.model is None:
            with translated_errors(self.url):
                response = self.client.get("/v1/models")
            check_status(response)
            models = response.json().get("data") or []
            if not models:
                raise ChatError(f"{self.url} serves no models")
            self.model = models[0]["id"]
        return self.model

    def stream(self, session: ChatSession) -> Iterator[Delta]:
        body = request_body(session, self.model_id())
        with translated_errors(self.url), self.client.stream("POST", "/v1/chat/completions", json=body) as response:
            check_status(response)
            for line in response.iter_lines():
                delta = parse_event(line)
                if delta is not None:
                    yield delta
        # Leaving the `with` early (a KeyboardInterrupt) closes the connection unread.


@contextmanager
def translated_errors(url: str) -> Iterator[None]:
    """httpx's transport errors as one-line ChatErrors naming the server."""
    try:
        yield
    except httpx.ConnectError as error:
        raise ChatError(f"cannot reach {url}: {error}") from None
    except httpx.TransportError as error:
        raise ChatError(f"the connection to {url} failed: {error or type(error).__name__}") from None


def request_body(session: ChatSession, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": session.conversation(), "stream": True}
    if session.temperature is not None:
        body["temperature"] = session.temperature
    if session.max_tokens is not None:
        body["max_tokens"] = session.max_tokens
    return body


def check_status(response: httpx.Response) -> None:
    """ChatError with the server's own message for an error status."""
    if response.status_code < 400:
        return
    response.read()
    raise ChatError(f"the server answered {response.status_code}: {error_message(response.text)}")


def error_message(text: str) -> str:
    """The message of an OpenAI error body (`{"error": {"message": ...}}`), else the text itself."""
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return " ".join(text.split())[:200] or "(no message)"


def parse_event(line: str) -> Delta | None:
    """The text of one SSE line of a chat completion stream (None: nothing to show); an
    error event mid-stream becomes a ChatError."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:"):].strip()
    if not data or data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError:
        raise ChatError(f"the server sent an event that is not JSON: {data[:80]}") from None
    if "error" in event:
        raise ChatError(f"the reply broke off: {error_message(data)}")
    choices = event.get("choices") or []
    delta = (choices[0].get("delta") or {}) if choices else {}
    reasoning, content = delta.get("reasoning_content") or "", delta.get("content") or ""
    return Delta(reasoning, content) if reasoning or content else None
