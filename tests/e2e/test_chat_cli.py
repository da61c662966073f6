"""`flint chat` driven through a pseudo-terminal, as a person would: against a real `flint
serve` of a tiny random model (it starts in seconds; its text is gibberish, so the tests check
what the server's /metrics and the chat's own /save say), and once with the model in process.

Every chat is greedy (--temperature 0): the random model's output is then the same on every
run, and it does not happen on its EOS within the tokens asked for."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pexpect
import pytest
from flint_process import FLINT, free_port, start_flint, wait_for_health, write_tiny_model
from prometheus_client.parser import text_string_to_metric_families

from api.terminal.chat import PROMPT

LONG_CONTEXT = 16384  # the tiny model decodes thousands of tokens a second: room for a reply that lasts
LONG = LONG_CONTEXT - 256  # tokens: a reply that cannot end by itself before a test stops it
API_KEY = "chat-test-key"
PATIENCE = 60  # seconds for anything the chat or the server should do at once
# pexpect forks this (JAX-threaded) process for its pseudo-terminal, and Python warns of
# that; the child only sets up the terminal and execs `flint`.
pytestmark = [pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:This process:DeprecationWarning")]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint, LONG_CONTEXT)


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory) -> str:
    """A `flint serve` of the tiny model, behind API_KEY, one sequence at a time; its base URL."""
    port, log_path = free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    process = start_flint(["--model", str(tiny_model), "--port", str(port), "--api-key", API_KEY,
                           "--max-model-len", str(LONG_CONTEXT), "--max-num-seqs", "1",
                           "--max-num-batched-tokens", "1", "--num-pages", str(LONG_CONTEXT // 16 + 2)], log_path)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process, log_path)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=60)


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ChatTerminal:
    """`flint chat ARGS` in a pseudo-terminal."""

    def __init__(self, *args: str) -> None:
        env = {key: value for key, value in os.environ.items() if key not in ("FLINT_URL", "FLINT_API_KEY")}
        env["TERM"] = "dumb"  # readline's plainest output: no escape sequences around the prompt
        # Started with SIGINT ignored, as a shell's background job (or CI's runner) may start
        # it: Ctrl-C must still stop a reply (flint chat installs its own handler).
        self.child = pexpect.spawn(FLINT, ["chat", "--temperature", "0", *args], env=env, encoding="utf-8",
                                   codec_errors="replace", timeout=PATIENCE, dimensions=(24, 400),
                                   preexec_fn=ignore_sigint)
        self.prompt()

    def prompt(self, timeout: float = PATIENCE) -> str:
        """Everything printed up to the next prompt."""
        self.child.expect_exact(PROMPT, timeout=timeout)
        return self.child.before

    def say(self, line: str) -> None:
        """Type `line` and wait for its echo: what is printed next is the chat's."""
        self.child.sendline(line)
        self.child.expect_exact(line + "\r\n")

    def command(self, line: str) -> str:
        self.say(line)
        return self.prompt()

    def close(self) -> None:
        if self.child.isalive():
            self.child.sendeof()
            self.child.expect(pexpect.EOF)
        self.child.close()


@pytest.fixture
def open_chat():
    terminals = []

    def open_(*args: str) -> ChatTerminal:
        terminals.append(ChatTerminal(*args))
        return terminals[-1]

    yield open_
    for terminal in terminals:
        terminal.close()


def metrics(base_url: str) -> dict[str, float]:
    """The flint: gauges and counters (counters by their family name, without _total)."""
    text = httpx.get(f"{base_url}/metrics").text
    return {family.name: family.samples[0].value for family in text_string_to_metric_families(text)
            if family.type in ("gauge", "counter") and family.name.startswith("flint:") and family.samples}


def wait_for(base_url: str, ready, what: str) -> dict[str, float]:
    deadline = time.monotonic() + PATIENCE
    while not ready(now := metrics(base_url)):
        assert time.monotonic() < deadline, f"{what}: {now}"
        time.sleep(0.05)
    return now


def saved(terminal: ChatTerminal, path) -> dict:
    assert "saved" in terminal.command(f"/save {path}")
    return json.loads(path.read_text())


def test_a_reply_streams_while_it_is_generated(server, open_chat, tmp_path):
    chat = open_chat("--url", server, "--api-key", API_KEY, "--max-tokens", "2000")
    chat.say("Tell me a story")
    chat.child.expect(r"\S")  # the reply's first text...
    assert metrics(server)["flint:num_requests_running"] == 1  # ... shows while the rest is generated
    printed = chat.child.before + chat.child.after + chat.prompt()
    reply = saved(chat, tmp_path / "chat.json")["messages"]
    assert [message["role"] for message in reply] == ["user", "assistant"]
    assert reply[1]["content"] and printed.replace("\r\n", "\n") == reply[1]["content"] + "\n"


def test_reset_clears_the_conversation_and_keeps_the_system_prompt(server, open_chat, tmp_path):
    chat = open_chat("--url", server, "--api-key", API_KEY, "--system", "Be brief.", "--max-tokens", "8")

    def prompt_tokens_of(question: str) -> int:
        before = metrics(server)["flint:prompt_tokens"]
        chat.say(question)
        chat.prompt()
        return wait_for(server, lambda now: now["flint:prompt_tokens"] > before,
                        "the reply was never counted")["flint:prompt_tokens"] - before

    first = prompt_tokens_of("Hello")
    assert prompt_tokens_of("Hello") > first  # the second turn sends the first one too
    assert len(saved(chat, tmp_path / "before.json")["messages"]) == 4
    assert "conversation cleared" in chat.command("/reset")
    after = saved(chat, tmp_path / "after.json")
    assert after["messages"] == [] and after["system"] == "Be brief."
    assert prompt_tokens_of("Hello") == first  # the server sees the first turn again, system prompt and all


def test_ctrl_c_stops_a_reply_and_the_chat_goes_on(server, open_chat, tmp_path):
    chat = open_chat("--url", server, "--api-key", API_KEY, "--max-tokens", str(LONG))
    before = metrics(server)
    chat.say("Tell me a long story")
    chat.child.expect(r"\S")
    assert metrics(server)["flint:num_requests_running"] == 1
    chat.child.sendintr()
    assert "(stopped)" in chat.prompt()
    stopped = wait_for(server, lambda now: now["flint:num_requests_running"] == 0,
                       "the server still generates the stopped reply")
    generated = stopped["flint:generation_tokens"] - before["flint:generation_tokens"]
    assert 0 < generated < LONG  # the request was aborted, not run to its end
    kept = saved(chat, tmp_path / "chat.json")["messages"]
    assert [message["role"] for message in kept] == ["user", "assistant"] and kept[1]["content"]
    assert "token limit per reply: 4" in chat.command("/max-tokens 4")
    chat.say("And another one")
    chat.prompt()
    assert len(saved(chat, tmp_path / "chat.json")["messages"]) == 4  # the chat answered again


def test_server_errors_are_one_line_and_the_chat_goes_on(server, open_chat):
    chat = open_chat("--url", server, "--api-key", "wrong-key", "--model", "tiny", "--max-tokens", "4")
    chat.say("Hello")
    assert "error: the server answered 401" in chat.prompt()
    chat.say("/temperature hot")
    assert "the temperature must be a number from 0 to 2" in chat.prompt()
    nowhere = open_chat("--url", f"http://127.0.0.1:{free_port()}", "--max-tokens", "4")
    nowhere.say("Hello")
    assert "error: cannot reach" in nowhere.prompt()
    assert "conversation cleared" in nowhere.command("/reset")  # still chatting


def test_an_in_process_chat_answers_and_ctrl_c_stops_it(tiny_model, open_chat, tmp_path):
    chat = open_chat("--local", "--model", str(tiny_model), "--max-model-len", str(LONG_CONTEXT))
    chat.say("Tell me a long story")
    chat.child.expect(r"\S", timeout=300)
    chat.child.sendintr()
    assert "(stopped)" in chat.prompt()  # the reply had all the context left: only the interrupt ended it
    assert "token limit per reply: 4" in chat.command("/max-tokens 4")
    chat.say("And another one")  # the engine, left idle by the abort, answers again
    chat.prompt()
    kept = saved(chat, tmp_path / "chat.json")["messages"]
    assert [message["role"] for message in kept] == ["user", "assistant"] * 2
    assert all(message["content"] for message in kept)
