"""`flint generate` streams an answer from the embedded model to the terminal."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

FLINT = shutil.which("flint", path=str(Path(sys.executable).parent))


def test_chat_generate_answers_the_capital_of_france():
    result = subprocess.run(
        [FLINT, "generate", "--chat", "What is the capital of France?", "--max-tokens", "24", "--max-model-len", "256"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Paris" in result.stdout
    assert "compiled bucket" in result.stderr  # start-up compilation shows its progress
    assert "<|im_end|>" not in result.stdout
