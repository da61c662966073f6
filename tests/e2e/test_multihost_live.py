"""`flint serve` as a group of two processes, with `jax.distributed` on the CPU.

Each process sees two host devices; together they form one 4-device tensor-parallel mesh,
their collectives over gloo. Process 0 serves HTTP and its steps are replayed by process 1.
The group must answer as a single process on one device does (float32, the same tiny
random model), stop together on SIGTERM, and give up, loudly, on a follower that stops
answering instead of hanging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from flint_process import free_port, start_flint, wait_for_health, write_tiny_model
from lora_files import random_adapter, write_adapter
from tiny_models import tiny_checkpoint

ENGINE_FLAGS = ["--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "4",
                "--dtype", "float32", "--quantization", "none"]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time,", "1, 2, 3, 5, 8,"]
FOLLOWER_TIMEOUT = 5  # seconds: short, so that the hang test gives up quickly
START_TIMEOUT = 600


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint)


@pytest.fixture(scope="module")
def lora_flags(tiny_model, tmp_path_factory, smollm2_checkpoint):
    """`--lora tuned=...`: a random adapter of the tiny model on every projection, which the
    leader writes into a slot on the first request naming it and the follower replays."""
    config = tiny_checkpoint(smollm2_checkpoint.config.vocab_size).config
    path = write_adapter(tmp_path_factory.mktemp("lora") / "tuned", random_adapter(config, 4, seed=3, magnitude=1.0),
                         4, 8.0)
    return ["--lora", f"tuned={path}", "--max-loras", "2", "--max-lora-rank", "4"]


class Group:
    """A leader and a follower started with the same flags; the leader's base URL."""

    def __init__(self, model: Path, directory: Path, name: str, lora_flags: list[str]) -> None:
        self.port, coordinator = free_port(), f"127.0.0.1:{free_port()}"
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
        flags = ["--model", str(model), "--port", str(self.port), *ENGINE_FLAGS, *lora_flags, "--tensor-parallel-size", "4",
                 "--coordinator-address", coordinator, "--num-processes", "2",
                 "--follower-timeout", str(FOLLOWER_TIMEOUT), "--compilation-cache", str(directory / "cache")]
        self.logs = [directory / f"{name}-{rank}.log" for rank in (0, 1)]
        self.processes = [start_flint([*flags, "--process-id", str(rank), "--data-dir", str(directory / f"data{rank}")],
                                      self.logs[rank], env) for rank in (0, 1)]
        self.base_url = f"http://127.0.0.1:{self.port}"

    @property
    def leader(self) -> subprocess.Popen:
        return self.processes[0]

    @property
    def follower(self) -> subprocess.Popen:
        return self.processes[1]

    def log(self, rank: int) -> str:
        return self.logs[rank].read_text()

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(30)


@pytest.fixture(scope="module")
def servers(tiny_model, tmp_path_factory, lora_flags):
    """The group, and a single-process server on one device: started together."""
    directory = tmp_path_factory.mktemp("multihost")
    group = Group(tiny_model, directory, "group", lora_flags)
    port, single_log = free_port(), directory / "single.log"
    single = start_flint(["--model", str(tiny_model), "--port", str(port), *ENGINE_FLAGS, *lora_flags,
                          "--no-compilation-cache",
                          "--data-dir", str(directory / "single")], single_log,
                         {**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        wait_for_health(group.base_url, group.leader, group.logs[0], timeout=START_TIMEOUT)
        wait_for_health(f"http://127.0.0.1:{port}", single, single_log, timeout=START_TIMEOUT)
        yield group, f"http://127.0.0.1:{port}", directory
    finally:
        single.terminate()
        single.wait(60)
        group.kill()


def completions(base_url: str, model: str = "tiny-model"):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    return client.completions.create(model=model, prompt=PROMPTS, max_tokens=16, temperature=0, logprobs=2,
                                     extra_body={"ignore_eos": True}).choices


def test_the_group_forms_one_four_device_mesh(servers):
    group, _, _ = servers
    for rank in (0, 1):
        assert "4 cpu device(s), tensor parallel over 4; dtype float32" in group.log(rank), group.log(rank)[-2000:]
    assert "following the leader" in group.log(1)


@pytest.mark.parametrize("model", ["tiny-model", "tuned"])
def test_two_processes_answer_as_one(servers, model):
    """The base model, and a LoRA adapter: the follower replays the leader's slot write."""
    group, single_url, _ = servers
    together, alone = completions(group.base_url, model), completions(single_url, model)
    if model == "tuned":
        assert [choice.text for choice in alone] != [choice.text for choice in completions(single_url)]
    for split, whole in zip(together, alone):
        assert split.text == whole.text
        assert split.logprobs.tokens == whole.logprobs.tokens
        assert split.logprobs.token_logprobs == pytest.approx(whole.logprobs.token_logprobs, abs=1e-4)


def test_sigterm_to_every_process_stops_the_group_with_status_0(servers):
    """As Kubernetes stops a group: every pod gets SIGTERM at once. The follower waits for
    the leader's stop, so a request the leader still drains keeps its follower."""
    group, _, _ = servers
    for process in reversed(group.processes):
        process.send_signal(signal.SIGTERM)
    assert [process.wait(120) for process in group.processes] == [0, 0], group.log(0)[-2000:] + group.log(1)[-2000:]
    assert "the leader stopped the group" in group.log(1)


def test_a_follower_that_stops_answering_ends_the_stream_and_the_leader(servers, tiny_model, lora_flags):
    """A stopped follower never errors a collective, it blocks it: the leader's watchdog
    must see its heartbeat stop, end the stream with an error and exit 1, not hang."""
    _, _, directory = servers
    group = Group(tiny_model, directory, "hang", lora_flags)  # its programs come from the first group's cache
    try:
        wait_for_health(group.base_url, group.leader, group.logs[0], timeout=START_TIMEOUT)
        body = {"prompt": "Hi", "max_tokens": 200, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", f"{group.base_url}/v1/completions", json=body, timeout=120) as response:
            events = (json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {"))
            first = next(events)
            group.follower.send_signal(signal.SIGSTOP)
            last = [first, *events][-1]
        assert "error" in last, last  # the dialect's terminal error event, not a cut connection
        assert group.leader.wait(120) == 1
        assert "follower process 1 stopped answering" in group.log(0)
    finally:
        group.kill()
