"""The chat's HTTP transport (against httpx's mock transport), its printing of a reply, and
what the conversation keeps when a reply ends, fails or is interrupted."""

from __future__ import annotations

import io
import json

import httpx
import pytest

from api.terminal.chat import ask
from api.terminal.remote import RemoteChat, error_message, parse_event, request_body
from api.terminal.screen import DIM, RESET, Screen
from api.terminal.session import ChatSession
from api.terminal.transport import ChatError, Delta


def chunk(**delta) -> str:
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})


def test_stream_events_become_deltas():
    assert parse_event(chunk(role="assistant", content="")) is None
    assert parse_event(chunk(content="Hi")) == Delta("", "Hi")
    assert parse_event(chunk(reasoning_content="Hmm")) == Delta("Hmm", "")
    assert parse_event("data: [DONE]") is None and parse_event("") is None and parse_event("event: x") is None
    usage_only = 'data: {"choices": [], "usage": {"prompt_tokens": 3}}'
    assert parse_event(usage_only) is None


def test_an_error_event_mid_stream_is_a_chat_error():
    with pytest.raises(ChatError, match="the reply broke off: the engine failed"):
        parse_event('data: {"error": {"message": "the engine failed", "type": "server_error"}}')


def test_error_bodies_give_their_message():
    assert error_message('{"error": {"message": "Invalid API key.", "type": "invalid_request_error"}}') == \
        "Invalid API key."
    assert error_message("<html>\n  Bad   gateway</html>") == "<html> Bad gateway</html>"


def test_the_request_names_only_the_settings_that_are_set():
    session = ChatSession(system="S", messages=[{"role": "user", "content": "Q"}])
    assert request_body(session, "m") == {"model": "m", "messages": session.conversation(), "stream": True}
    session.temperature, session.max_tokens = 0.0, 5
    assert request_body(session, "m") == {"model": "m", "messages": session.conversation(), "stream": True,
                                          "temperature": 0.0, "max_tokens": 5}


def remote(handler) -> RemoteChat:
    chat = RemoteChat("http://flint.test/v1/", api_key="k")  # as the OpenAI SDK's base URL
    chat.client = httpx.Client(base_url=chat.url, headers=chat.client.headers, transport=httpx.MockTransport(handler))
    return chat


def test_the_remote_chat_streams_from_the_servers_first_model_with_the_key():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny"}, {"id": "other"}]})
        body = "\n\n".join([chunk(role="assistant"), chunk(reasoning_content="think"), chunk(content="Hel"),
                            chunk(content="lo"), "data: [DONE]"]) + "\n\n"
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    deltas = list(remote(handler).stream(ChatSession(messages=[{"role": "user", "content": "Hi"}])))
    assert deltas == [Delta("think", ""), Delta("", "Hel"), Delta("", "lo")]
    assert json.loads(seen[-1].content)["model"] == "tiny"
    assert all(request.headers["authorization"] == "Bearer k" for request in seen)


def test_a_refused_request_is_one_line_with_the_servers_message():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "Invalid API key.", "type": "invalid_request_error"}})

    with pytest.raises(ChatError, match="^the server answered 401: Invalid API key.$"):
        list(remote(handler).stream(ChatSession()))


def test_an_unreachable_server_is_one_line():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused")

    with pytest.raises(ChatError, match="^cannot reach http://flint.test: Connection refused$"):
        list(remote(handler).stream(ChatSession()))


def printed(deltas: list[Delta], color: bool) -> str:
    out = io.StringIO()
    reply = Screen(out, io.StringIO(), color=color).reply()
    for delta in deltas:
        reply.show(delta)
    reply.end()
    return out.getvalue()


def test_thinking_is_dimmed_and_apart_from_the_answer():
    deltas = [Delta("Let me ", ""), Delta("think.", ""), Delta("", "Paris"), Delta("", ".")]
    assert printed(deltas, color=True) == f"{DIM}Let me think.{RESET}\n\nParis.\n"
    assert printed(deltas, color=False) == "Let me think.\n\nParis.\n"
    assert printed([Delta("", "Done.\n")], color=True) == "Done.\n"  # no blank line added


class FakeTransport:
    """Replies with `deltas`, then raises `then` (if any); records whether the stream was closed."""

    def __init__(self, deltas: list[Delta], then: BaseException | None = None) -> None:
        self.deltas, self.then, self.closed = deltas, then, False

    def describe(self) -> str:
        return "fake"

    def stream(self, session):
        try:
            yield from self.deltas
            if self.then is not None:
                raise self.then
        finally:
            self.closed = True


def asked(transport: FakeTransport) -> tuple[ChatSession, str, str]:
    session, out, err = ChatSession(), io.StringIO(), io.StringIO()
    ask(transport, session, "Q", Screen(out, err, color=False))
    return session, out.getvalue(), err.getvalue()


def test_an_answered_question_keeps_both_turns_and_not_the_thinking():
    session, _, _ = asked(FakeTransport([Delta("hmm", ""), Delta("", "A")]))
    assert session.messages == [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]


def test_a_failed_reply_drops_its_question_and_says_why():
    session, _, err = asked(FakeTransport([], ChatError("the server answered 401: no")))
    assert session.messages == [] and err == "error: the server answered 401: no\n"


def test_an_interrupted_reply_keeps_what_was_shown():
    transport = FakeTransport([Delta("", "Once upon")], KeyboardInterrupt())
    session, out, _ = asked(transport)
    assert session.messages[-1] == {"role": "assistant", "content": "Once upon"}
    assert out == "Once upon\n(stopped)\n" and transport.closed


def test_a_reply_interrupted_before_any_answer_drops_its_question():
    session, _, _ = asked(FakeTransport([Delta("thinking", "")], KeyboardInterrupt()))
    assert session.messages == []
