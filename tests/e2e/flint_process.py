"""Helpers for tests that run `flint serve` as a subprocess: a tiny model on disk, a free
port, starting the server and waiting for it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx

from engine.loader.orbax import save_orbax
from tiny_models import tiny_checkpoint
from tools.convert import write_gguf_tokenizer

FLINT = shutil.which("flint", path=str(Path(sys.executable).parent))
# One sequence, one token per step: a single compiled shape, so start-up takes seconds where
# the defaults' nine shapes take minutes.
SMALL_ENGINE_FLAGS = ["--max-model-len", "512", "--max-num-seqs", "1", "--max-num-batched-tokens", "1",
                      "--num-pages", "64"]


def write_tiny_model(directory: Path, smollm2_checkpoint, context_length: int | None = None) -> Path:
    """A 2-layer random model with SmolLM2's tokenizer, as an Orbax checkpoint `flint serve`
    loads; `context_length`: its positions, if more than the tiny model's 512 (for streams
    long enough to outlast a test's timing)."""
    vocab_size = smollm2_checkpoint.config.vocab_size
    tiny = tiny_checkpoint(vocab_size)
    config = tiny.config if context_length is None else replace(tiny.config, max_position_embeddings=context_length)
    save_orbax(directory, config, tiny.params)
    write_gguf_tokenizer(smollm2_checkpoint.gguf_fields, directory)
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_flint(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`flint serve ARGS` with its output in `log_path` (a pipe nobody reads could fill and
    block it); `env`: the environment, by default this process's."""
    assert FLINT, "the flint console script is not installed in this environment"
    log = log_path.open("w")
    return subprocess.Popen([FLINT, "serve", *args], stdout=log, stderr=subprocess.STDOUT, text=True, env=env)


def wait_for_health(base_url: str, process: subprocess.Popen, log_path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, log_path.read_text()
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"flint serve did not become healthy:\n{log_path.read_text()}")
