"""`flint serve --tensor-parallel-size 4` on a 4-device CPU mesh answers as one device does.

Two servers on the embedded SmolLM2 in float32, started side by side with the same 4 host
devices: one splits the model over all four (its MLP columns and vocabulary divide; its 3
KV heads do not, so attention stays replicated), the other runs on the first alone. Greedy
completions through the `openai` SDK must agree token for token, and their logprobs to
float32 reduction-order noise; and again after each took new weights from a checkpoint
(`POST /v1/update_weights`), re-laid over its devices as served."""

from __future__ import annotations

import os
import re

import httpx
import openai
import pytest

from flint_process import free_port, start_flint, wait_for_health

from engine.loader.source import resolve_model

# Two token buckets (1 and 4), both compiled before /health turns ok: nothing compiles in
# the background while the completions run (a 32-token bucket cost about 25 s on 2 cores).
ENGINE_FLAGS = ["--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "4",
                "--dtype", "float32", "--quantization", "none", "--no-compilation-cache", "--allow-runtime-weights"]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "1, 2, 3, 5, 8,"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """{tensor-parallel size: (base URL, log path)} for sizes 4 and 1, started together."""
    directory = tmp_path_factory.mktemp("tensor-parallel")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    started = {}
    for size in (4, 1):
        port, log_path = free_port(), directory / f"tp{size}.log"
        process = start_flint(["--port", str(port), "--tensor-parallel-size", str(size), *ENGINE_FLAGS,
                               "--data-dir", str(directory / f"data{size}")], log_path, env)
        started[size] = (f"http://127.0.0.1:{port}", log_path, process)
    try:
        for base_url, log_path, process in started.values():
            wait_for_health(base_url, process, log_path, timeout=600)
        yield {size: (base_url, log_path) for size, (base_url, log_path, _) in started.items()}
    finally:
        for _, _, process in started.values():
            process.terminate()
            process.wait(60)


def completion(base_url: str, prompt: str):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    return client.completions.create(model="SmolLM2-135M-Instruct", prompt=prompt, max_tokens=24,
                                     temperature=0, logprobs=2).choices[0]


def test_the_model_is_split_over_four_devices(servers):
    for size, (_, log_path) in servers.items():
        log = log_path.read_text()
        assert re.search(rf"{size} cpu device\(s\), tensor parallel over {size}; dtype float32", log), log[-2000:]


def test_four_devices_answer_as_one(servers):
    (split_url, _), (single_url, _) = servers[4], servers[1]
    for prompt in PROMPTS:
        split, single = completion(split_url, prompt), completion(single_url, prompt)
        assert split.logprobs.tokens == single.logprobs.tokens, prompt
        assert split.text == single.text
        assert split.logprobs.token_logprobs == pytest.approx(single.logprobs.token_logprobs, abs=1e-4)


def test_new_weights_are_laid_out_over_the_four_devices_as_served(servers):
    """The embedded checkpoint again as the new weights: the split server's relayout places
    each array as the one it replaces, or its compiled steps would refuse the new state."""
    (split_url, _), (single_url, _) = servers[4], servers[1]
    before = completion(split_url, PROMPTS[0])
    response = httpx.post(f"{split_url}/v1/update_weights", json={"path": str(resolve_model(None).path)},
                          timeout=600)
    assert response.status_code == 200 and response.json()["weights_version"] == 1, response.text
    split, single = completion(split_url, PROMPTS[0]), completion(single_url, PROMPTS[0])
    assert split.text == single.text == before.text
    assert split.logprobs.token_logprobs == pytest.approx(before.logprobs.token_logprobs, abs=1e-4)
