"""A two-process group's first requests, sent the moment /health turns ok (issue 23, defect 1).

Two `flint serve` processes on one host, one CPU device each, tensor parallel over both.
A leader used to turn healthy with two buckets (the smallest and the largest) and compile
the rest in a background thread, whose transfers across processes the follower never
mirrored: they crossed the steps' collectives and gloo aborted the group. Now every process
compiles every bucket, in the same order, before the leader turns healthy.

The race is in the start-up, not in the model, so this is the cheapest group that had it:
the tiny random model with three buckets (1, 4 and 8 tokens), one of which the leader used
to leave to the background. The issue's form, the embedded SmolLM2 with its nine default
buckets, compiles for tens of minutes in two processes on a 2-core machine, and even the
tiny model's nine took over ten minutes there. Requests go on for as long as /health says
buckets are missing (before the fix, while the background compile ran), and each must agree
with an independent NumPy forward of the same weights. The tiny model's context (512
positions) is below the default --max-model-len, so the follower must cap it as the leader
does, or their shapes, and so their collectives, differ from the first bucket on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from flint_process import free_port, start_flint, wait_for_health, write_tiny_model
from numpy_reference import forward
from tiny_models import tiny_checkpoint

PROMPT = "The three primary colors are red, yellow and"
NUM_TOKENS = 24
START_TIMEOUT = 900  # seconds: two processes compile together on a shared 2-core machine
# Three buckets (1, 4, 8): the fewest of which start-up used to leave one to the background.
BATCH_FLAGS = ["--max-num-batched-tokens", "8", "--max-num-seqs", "4"]
SERVE_TIMEOUT = 300  # seconds of requests at most while buckets are missing


def assert_greedy_reference(choice: dict, tiny, prompt_ids: list[int]) -> None:
    """Each generated token is the reference's most likely one (to within a near tie) and
    carries the reference's logprob."""
    generated = choice["token_ids"]
    assert len(generated) == NUM_TOKENS
    logits = forward(tiny.config, tiny.params, prompt_ids + generated)[len(prompt_ids) - 1: -1]
    shifted = logits - logits.max(-1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    chosen = logprobs[np.arange(NUM_TOKENS), generated]
    assert np.all(chosen >= logprobs.max(-1) - 1e-4), (generated, logprobs.argmax(-1).tolist())
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(chosen.tolist(), abs=1e-4)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint)


def start_group(model: Path, directory: Path) -> tuple[list[subprocess.Popen], list[Path], str]:
    """Leader and follower (started first, as in the issue), their logs, the leader's URL."""
    port, coordinator = free_port(), f"127.0.0.1:{free_port()}"
    flags = ["--model", str(model), "--port", str(port), "--coordinator-address", coordinator, "--num-processes", "2",
             "--tensor-parallel-size", "2", *BATCH_FLAGS, "--dtype", "float32", "--quantization", "none",
             "--compilation-cache", str(directory / "cache")]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # one host device a process
    logs = [directory / f"process-{rank}.log" for rank in (0, 1)]
    started = {rank: start_flint([*flags, "--process-id", str(rank), "--data-dir", str(directory / f"data{rank}")],
                                 logs[rank], env) for rank in (1, 0)}
    return [started[0], started[1]], logs, f"http://127.0.0.1:{port}"


def test_requests_from_the_moment_the_group_is_healthy(tmp_path, tiny_model, smollm2_checkpoint, smollm2_tokenizer):
    processes, logs, base_url = start_group(tiny_model, tmp_path)
    try:
        wait_for_health(base_url, processes[0], logs[0], timeout=START_TIMEOUT)
        tiny, prompt_ids = tiny_checkpoint(smollm2_checkpoint.config.vocab_size), smollm2_tokenizer.encode(PROMPT)
        body = {"prompt": prompt_ids, "max_tokens": NUM_TOKENS, "temperature": 0, "ignore_eos": True,
                "logprobs": 1, "return_token_ids": True}
        deadline, missing = time.monotonic() + SERVE_TIMEOUT, None
        while missing != [] and time.monotonic() < deadline:
            response = httpx.post(f"{base_url}/v1/completions", json=body, timeout=120)
            assert response.status_code == 200, response.text + "".join(log.read_text()[-3000:] for log in logs)
            assert_greedy_reference(response.json()["choices"][0], tiny, prompt_ids)
            missing = httpx.get(f"{base_url}/health").json()["buckets"]["missing"]
        assert httpx.get(f"{base_url}/health").json()["buckets"]["compiled"] == [1, 4, 8]
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        assert [process.wait(120) for process in processes] == [0, 0], logs[1].read_text()[-3000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(30)
