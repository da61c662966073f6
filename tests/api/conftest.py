"""API fixtures: apps serving a tiny random model over SmolLM2's tokenizer, fast to compile."""

from __future__ import annotations

import pytest
from api_helpers import TINY_ENGINE, wait_until_serving
from litestar.testing import TestClient
from qwen3_tiny import qwen3_checkpoint, qwen3_tokenizer
from tiny_models import tiny_checkpoint

from api.server.app import create_app
from api.server.settings import Settings
from engine.config import EngineConfig
from engine.engine import Engine
from engine.host.request import Request
from engine.text.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def tiny_app_factory(smollm2_tokenizer):
    """make(settings, tokenizer) -> an app whose engine is the tiny random model (compiled
    per app), over SmolLM2's tokenizer or another of the same vocabulary."""
    checkpoint = tiny_checkpoint(smollm2_tokenizer.vocab_size)

    def make(settings: Settings | None = None, tokenizer: Tokenizer | None = None):
        def engine_factory(settings: Settings) -> Engine:
            engine = Engine(checkpoint, tokenizer or smollm2_tokenizer, settings.engine)
            engine.runner.warmup()
            return engine

        return create_app(settings or Settings(engine=TINY_ENGINE), engine_factory=engine_factory)

    return make


@pytest.fixture(scope="module")
def tiny_client(tiny_app_factory):
    """A started client on a tiny-model app, shared by a module's tests."""
    with TestClient(app=tiny_app_factory()) as client:
        wait_until_serving(client)
        yield client


@pytest.fixture(scope="session")
def shared_tiny_client(tiny_app_factory):
    """One started tiny-model app shared by every module that needs no settings of its own
    (each app compiles its engine, which costs tens of seconds on a small CPU)."""
    with TestClient(app=tiny_app_factory()) as client:
        wait_until_serving(client, timeout=600)  # a generous bound: the machine may be busy
        yield client


@pytest.fixture(scope="session")
def tools_tiny_client(tiny_app_factory):
    """A tiny-model app with room for a tools preamble (512 tokens of context), shared by the
    tool-calling tests of every dialect. Two buckets, as TINY_ENGINE has."""
    config = EngineConfig(max_model_len=512, max_num_seqs=8, max_num_batched_tokens=128, num_pages=320,
                          token_buckets=(1, 128))
    with TestClient(app=tiny_app_factory(Settings(engine=config))) as client:
        wait_until_serving(client, timeout=600)
        yield client


def qwen3_app(tool_tokens: bool = True):
    """An app serving the tiny Qwen3-style reasoning model (tests/qwen3_tiny.py), with room
    for a thinking budget of 1024 tokens."""
    tokenizer = qwen3_tokenizer(tool_tokens=tool_tokens)
    checkpoint = qwen3_checkpoint(tokenizer.vocab_size)

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    config = EngineConfig(max_model_len=2048, max_num_seqs=8, max_num_batched_tokens=128, num_pages=800,
                          token_buckets=(8, 128))
    return create_app(Settings(engine=config), engine_factory=engine_factory)


@pytest.fixture(scope="session")
def qwen3_client():
    """The tiny Qwen3-style app, shared by the reasoning tests of every dialect."""
    with TestClient(app=qwen3_app()) as client:
        wait_until_serving(client, timeout=600)
        yield client


@pytest.fixture(scope="session")
def qwen3_tools_client():
    """The same model with its tool-call tags as text (tests/qwen3_tiny.py TOOL_TAGS says why),
    for the tests of tool calls after thinking."""
    with TestClient(app=qwen3_app(tool_tokens=False)) as client:
        wait_until_serving(client, timeout=600)
        yield client


@pytest.fixture(scope="module")
def client(shared_tiny_client):
    """The app a module's tests talk to: the shared one, unless the module defines its own."""
    return shared_tiny_client


@pytest.fixture(scope="module")
def tokenizer(client):
    """The tokenizer of the module's app."""
    return client.app.state.server.tokenizer


@pytest.fixture
def engine_requests(client, monkeypatch) -> list[Request]:
    """Every engine Request the module's `client` app makes while the test runs."""
    engine = client.app.state.server.running_engine
    seen: list[Request] = []
    original = engine.generate

    def generate(request: Request):
        seen.append(request)
        return original(request)

    monkeypatch.setattr(engine, "generate", generate)
    return seen
