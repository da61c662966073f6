"""Shared test setup: the repository root on sys.path (so tests import api/ and tools/), the
embedded SmolLM2 checkpoint and tokenizer (loaded once per session), and tiny random models."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from engine.engine import tokenizer_for  # noqa: E402  (after the sys.path setup above)
from engine.loader.checkpoint import Checkpoint, load_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Checkpoint:
    return load_checkpoint(None)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_checkpoint):
    return tokenizer_for(smollm2_checkpoint)
