"""Embeddings per second through HTTP, for tools/bench.py embed --servers: Flint's
`flint serve --embedding-model` against llama.cpp's `llama-server --embedding` on a GGUF of
the same checkpoint, made by llama.cpp's own converter (tools/bench/llama_server.py
`converted_gguf`: float32, as Flint serves it).

The servers run one at a time (neither shares the machine with the other), each sent the
same batches: one POST /v1/embeddings of B sentences, `repeats` times after a warm-up; a
server's rate is B over its fastest reply. llama-server runs as it ran fastest here
(`llama_command`).
"""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np

from engine.config import usable_cores
from tools.bench.llama_server import find_llama_server, llama_server_env, llama_server_version
from tools.bench.server_process import free_port, start_server, wait_for_log

START_TIMEOUT = 600.0


def flint_command(model: str, port: int, scratch: Path) -> list[str]:
    flint = str(Path(sys.executable).with_name("flint"))
    return [flint, "serve", "--port", str(port), "--embedding-model", model, "--data-dir", str(scratch),
            "--compilation-cache", str(scratch / "compilation-cache")]


def llama_command(binary: Path, gguf: Path, port: int, slots: int, max_tokens: int, pooling: str) -> list[str]:
    """llama-server with `slots` slots, each with room for the longest sentence, and
    physical batches of 512 tokens (at least a whole sentence: a non-causal model's text may
    not be split). Measured on all-MiniLM-L6-v2 (2 cores, 2026-11-29): 32 slots and 512-token
    batches were its best at 256 sentences and within a tenth of it at 1 and 32; batches of
    the whole context (8,192 tokens and more) were half as fast, their attention masked
    across every text of the batch."""
    context = -(-slots * max_tokens // 256) * 256
    physical = max(512, 1 << (max_tokens - 1).bit_length())
    return [str(binary), "-m", str(gguf), "--embedding", "--pooling", pooling, "-t", str(usable_cores()),
            "-np", str(slots), "-c", str(context), "-b", str(physical), "-ub", str(physical),
            "--host", "127.0.0.1", "--port", str(port)]


def timed_batches(url: str, model: str, batches: dict[int, list[str]], repeats: int) -> tuple[dict, np.ndarray]:
    """Each batch's fastest reply (seconds), and the first batch's vectors."""
    best, first = {}, None
    with httpx.Client(base_url=url, timeout=600) as client:
        for size, texts in batches.items():
            def post() -> list:
                reply = client.post("/v1/embeddings", json={"model": model, "input": texts})
                reply.raise_for_status()
                return [item["embedding"] for item in sorted(reply.json()["data"], key=lambda item: item["index"])]

            vectors = post()  # the warm-up
            first = np.asarray(vectors) if first is None else first
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                post()
                times.append(time.perf_counter() - start)
            best[size] = min(times)
    return best, first


def server_rates(model: str, model_id: str, gguf: Path, pooling: str, batches: dict[int, list[str]],
                 repeats: int, max_tokens: int) -> dict:
    """Flint's and llama-server's best times and first vectors, by server name."""
    results = {}
    binary = find_llama_server(None)
    with tempfile.TemporaryDirectory(prefix="flint-embed-") as scratch:
        for name in ("Flint", "llama-server"):
            port = free_port()
            if name == "Flint":
                command, env, served = flint_command(model, port, Path(scratch)), None, model_id
            else:
                command = llama_command(binary, gguf, port, min(32, max(batches)), max_tokens + 8, pooling)
                env, served = llama_server_env(binary), gguf.stem
            print(f"starting {name}: {shlex.join(command)}", flush=True)
            with ExitStack() as stack:
                server = start_server(name, command, port, Path(scratch) / f"{name}.log", stack, START_TIMEOUT, env)
                if name == "Flint":  # the chat model compiles its smaller buckets after /health: not beside the load
                    wait_for_log(server, "every bucket ready", START_TIMEOUT)
                results[name] = timed_batches(server.url, served, batches, repeats)
    results["version"] = llama_server_version(binary)
    return results


def print_server_table(sizes: list[int], results: dict) -> None:
    flint, flint_first = results["Flint"]
    llama, llama_first = results["llama-server"]
    print(f"\nThrough HTTP, one request a batch; llama-server {results['version']}:")
    print("| sentences a batch | Flint embeddings/s | llama-server embeddings/s | ratio |")
    print("| --- | --- | --- | --- |")
    for size in sizes:
        ours, theirs = size / flint[size], size / llama[size]
        print(f"| {size} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")
    cosines = (flint_first * llama_first).sum(1) / (np.linalg.norm(flint_first, axis=1) *
                                                   np.linalg.norm(llama_first, axis=1))
    print(f"least cosine between the two servers' vectors: {cosines.min():.6f}")
