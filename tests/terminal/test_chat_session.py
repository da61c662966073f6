"""The chat's state, slash commands and save format, without a server."""

from __future__ import annotations

import json

import pytest

from api.terminal.chat import first_key
from api.terminal.commands import HELP, run_command
from api.terminal.session import ChatSession


@pytest.fixture
def session() -> ChatSession:
    return ChatSession(system="Be brief.", temperature=0.5, max_tokens=64,
                       messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])


def test_the_system_prompt_leads_the_conversation_only_when_set(session):
    assert session.conversation()[0] == {"role": "system", "content": "Be brief."}
    assert session.conversation()[1:] == session.messages
    assert ChatSession(messages=session.messages).conversation() == session.messages


def test_system_sets_and_shows_the_system_prompt(session):
    assert run_command("/system You are a pirate.", session).message == "system prompt: You are a pirate."
    assert session.system == "You are a pirate."
    assert run_command("/system", session).message == "system prompt: You are a pirate."
    assert "no system prompt" in run_command("/system", ChatSession()).message


@pytest.mark.parametrize("value", ["hot", "-0.1", "2.5", "nan", "inf"])
def test_a_bad_temperature_is_refused_with_the_reason(session, value):
    outcome = run_command(f"/temperature {value}", session)
    assert outcome.failed and not outcome.quit
    assert outcome.message == f"the temperature must be a number from 0 to 2, not {value!r}"
    assert session.temperature == 0.5


def test_temperature_and_max_tokens_are_set_and_shown(session):
    assert run_command("/temperature 0", session).message == "temperature: 0"
    assert session.temperature == 0.0
    assert run_command("/temperature", ChatSession()).message == "temperature: the default"
    assert run_command("/max-tokens 12", session).message == "token limit per reply: 12"
    assert session.max_tokens == 12
    assert run_command("/max-tokens 0", session).failed and session.max_tokens == 12


def test_reset_clears_the_conversation_and_keeps_the_system_prompt_and_settings(session):
    assert not run_command("/reset", session).failed
    assert session.messages == [] and session.system == "Be brief." and session.temperature == 0.5


def test_save_and_load_round_trip(session, tmp_path):
    path = tmp_path / "chat.json"
    assert run_command(f"/save {path}", session).message == f"saved 2 messages to {path}"
    assert json.loads(path.read_text()) == {"system": "Be brief.", "temperature": 0.5, "max_tokens": 64,
                                            "messages": session.messages}
    restored = ChatSession()
    assert run_command(f"/load {path}", restored).message == f"loaded 2 messages from {path}"
    assert restored == session


def test_load_takes_a_leading_system_message_as_the_system_prompt(tmp_path):
    path = tmp_path / "openai.json"
    path.write_text(json.dumps({"messages": [{"role": "system", "content": "Be kind."},
                                             {"role": "user", "content": "Hi"}]}))
    session = ChatSession(system="old", temperature=1.0)
    run_command(f"/load {path}", session)
    assert session == ChatSession(system="Be kind.", messages=[{"role": "user", "content": "Hi"}])


@pytest.mark.parametrize(("text", "reason"), [
    ("{not json", "not JSON"),
    ("[]", "a saved chat is a JSON object"),
    ('{"messages": [{"role": "robot", "content": "beep"}]}', "message 0 must be an object with a `role`"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}',
     "a system message may only come first"),
    ('{"temperature": 9}', "the temperature must be a number from 0 to 2"),
    ('{"max_tokens": "many"}', "the token limit must be a positive integer"),
])
def test_a_file_that_is_not_a_saved_chat_is_refused_and_changes_nothing(session, tmp_path, text, reason):
    path = tmp_path / "bad.json"
    path.write_text(text)
    before = ChatSession(session.system, session.temperature, session.max_tokens, list(session.messages))
    outcome = run_command(f"/load {path}", session)
    assert outcome.failed and outcome.message.startswith(f"{path} is not a saved chat: {reason}")
    assert session == before


def test_load_and_save_say_why_a_file_cannot_be_used(session, tmp_path):
    missing = tmp_path / "missing.json"
    assert run_command(f"/load {missing}", session).message == f"cannot read {missing}: No such file or directory"
    nowhere = tmp_path / "no-such-dir" / "chat.json"
    assert run_command(f"/save {nowhere}", session).message == f"cannot save to {nowhere}: No such file or directory"
    assert run_command("/save", session).message == "usage: /save FILE"


def test_help_quit_and_unknown_commands(session):
    assert run_command("/help", session).message == HELP
    assert run_command("/quit", session).quit and run_command("/EXIT", session).quit
    unknown = run_command("/frobnicate now", session)
    assert unknown.failed and not unknown.quit and "unknown command /frobnicate" in unknown.message


def test_the_api_key_default_is_the_first_of_the_servers_keys():
    assert first_key("alpha, beta") == "alpha"
    assert first_key(None) is None and first_key(" , ") is None
