"""`flint chat --local`'s transport on a tiny reasoning model in process: its thinking comes
apart from its answer, and a Ctrl-C (a real SIGINT) stops the reply between engine steps."""

from __future__ import annotations

import os
import signal

import pytest
from qwen3_tiny import R1_STYLE_TEMPLATE, qwen3_checkpoint, qwen3_tokenizer

from api.terminal.local import LocalChat
from api.terminal.session import ChatSession
from api.terminal.transport import ChatError
from engine.config import EngineConfig
from engine.engine import Engine

MAX_MODEL_LEN = 256
CONFIG = EngineConfig(max_model_len=MAX_MODEL_LEN, max_num_seqs=1, max_num_batched_tokens=64, num_pages=20,
                      token_buckets=(1, 64), optimize_compiled_code=False)


@pytest.fixture(scope="module")
def chat() -> LocalChat:
    """A DeepSeek-R1-style model: its prompt opens the thinking section, so a short reply is all thought."""
    tokenizer = qwen3_tokenizer(chat_template=R1_STYLE_TEMPLATE)
    engine = Engine(qwen3_checkpoint(tokenizer.vocab_size, context_length=MAX_MODEL_LEN), tokenizer, CONFIG)
    engine.runner.warmup()
    return LocalChat(engine, "tiny-r1")


def asking(question: str, **settings) -> ChatSession:
    return ChatSession(temperature=0.0, messages=[{"role": "user", "content": question}], **settings)


def test_the_thinking_comes_apart_from_the_answer(chat):
    deltas = list(chat.stream(asking("What is 6 x 7?", max_tokens=8)))
    assert "".join(delta.reasoning for delta in deltas)
    assert "<think>" not in "".join(delta.reasoning + delta.content for delta in deltas)
    assert not chat.engine.has_unfinished()


def test_a_sigint_stops_the_reply_between_steps_and_leaves_the_engine_idle(chat):
    handler = signal.getsignal(signal.SIGINT)
    deltas = chat.stream(asking("Think at length.", max_tokens=MAX_MODEL_LEN))
    next(deltas)
    os.kill(os.getpid(), signal.SIGINT)  # held until the next step boundary, not raised here
    with pytest.raises(KeyboardInterrupt):
        for _ in deltas:
            pass
    assert not chat.engine.has_unfinished()
    assert signal.getsignal(signal.SIGINT) is handler
    assert list(chat.stream(asking("Again?", max_tokens=4)))  # the engine answers the next one


def test_a_conversation_past_the_context_is_one_line(chat):
    with pytest.raises(ChatError, match="fill the context window of 256: /reset"):
        list(chat.stream(asking("x" * 400)))
