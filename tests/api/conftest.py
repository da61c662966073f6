"""API fixtures: apps serving a tiny random model over SmolLM2's tokenizer, fast to compile."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from api.app import create_app
from api.settings import Settings
from engine.engine import Engine
from api_helpers import TINY_ENGINE, wait_until_serving
from tiny_models import tiny_checkpoint

@pytest.fixture(scope="session")
def tiny_app_factory(smollm2_tokenizer):
    """make(settings) -> an app whose engine is the tiny random model (compiled per app)."""
    checkpoint = tiny_checkpoint(smollm2_tokenizer.vocab_size)

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    def make(settings: Settings | None = None):
        return create_app(settings or Settings(engine=TINY_ENGINE), engine_factory=engine_factory)

    return make


@pytest.fixture(scope="module")
def tiny_client(tiny_app_factory):
    """A started client on a tiny-model app, shared by a module's tests."""
    with TestClient(app=tiny_app_factory()) as client:
        wait_until_serving(client)
        yield client
