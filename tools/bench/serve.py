"""Flint against llama.cpp's llama-server through HTTP, for tools/bench.py serve.

Both servers run the same GGUF, one at a time, and take turns under the same closed-loop load:
N clients, each sending streamed /v1/completions requests one after another (random
token-id prompts, temperature 0, EOS ignored), so that the figures measure the servers,
HTTP and SSE included, and not the engines alone. The turns alternate (Flint, llama-server,
Flint, ...) and each figure is the best of its rounds, since a shared machine only ever
makes a run slower.

llama-server is found or built by tools/bench/llama_server.py; tools/bench/server_process.py starts,
watches and stops the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from engine.config import usable_cores
from engine.loader.source import resolve_model
from tools.bench.llama_server import LLAMA_CPP_PYTHON_VERSION, find_llama_server, llama_server_env, llama_server_version
from tools.bench.serve_report import SERVERS, print_report, summarize
from tools.bench.server_process import Server, failure_log, free_port, resident_bytes, start_server, wait_for_log


def flint_command(args: argparse.Namespace, port: int, data_dir: Path) -> list[str]:
    """`flint serve` with as many sequences as llama-server has slots, its compilation cache
    in the benchmark's scratch directory (cold at the first start, warm after); --flint-args
    last, to override."""
    model = ["--model", args.model] if args.model else []
    return [str(Path(sys.executable).with_name("flint")), "serve", "--port", str(port), *model,
            "--max-num-seqs", str(max(args.concurrency)), "--data-dir", str(data_dir),
            "--compilation-cache", str(data_dir / "compilation-cache"), *shlex.split(args.flint_args)]


def llama_command(args: argparse.Namespace, binary: Path, port: int, gguf: Path, slots: int) -> list[str]:
    """llama-server as its own docs run it for N concurrent clients (`-np N --cont-batching`):
    one slot per client, each with room for the longest request it will get. A unified
    cache sized for the largest concurrency made llama-server's decode slower at every
    concurrency (its attention reads the whole cache), so each concurrency gets its own."""
    per_slot = max(args.prompt_tokens + args.output_tokens + 1, args.ttft_prompt_tokens + 2 if slots == 1 else 0)
    context = -(-slots * per_slot // 256) * 256
    return [str(binary), "-m", str(gguf), "-t", str(usable_cores()), "-np", str(slots), "--cont-batching",
            "-c", str(context), "--host", "127.0.0.1", "--port", str(port), *shlex.split(args.llama_args)]


def start_one(name: str, args: argparse.Namespace, binary: Path, stack: ExitStack, scratch: Path,
              slots: int = 1) -> Server:
    """Start `name` alone: each server runs only for its own turn, so that neither ever
    shares the machine with the other (llama-server with `slots` slots)."""
    port = free_port()
    if name == "Flint":
        command, env = flint_command(args, port, scratch), None
    else:
        gguf = resolve_model(args.model).path
        command, env = llama_command(args, binary, port, gguf, slots), llama_server_env(binary)
    print(f"starting {name}: {shlex.join(command)}", flush=True)
    server = start_server(name, command, port, scratch / f"{name}.log", stack, args.start_timeout, env)
    print(f"  healthy after {server.healthy_after:.1f} s", flush=True)
    if name == "Flint":  # healthy before its smaller buckets are ready: measure once they are
        wait_for_log(server, "every bucket ready", args.start_timeout)
        print(f"  every bucket ready after {time.perf_counter() - server.started:.1f} s", flush=True)
    return server


# The load.

@dataclass
class Reply:
    ttft: float  # seconds from sending to the first chunk with a choice
    tokens: int  # output tokens, from the usage the last chunk carries


@dataclass
class Run:
    tokens_per_second: float  # output tokens of every reply over the run's wall time
    ttfts: list[float]
    tokens: list[int]  # of each reply: max_tokens every time, or a server stopped early


async def stream_completion(client: httpx.AsyncClient, body: dict) -> Reply:
    """One streamed completion, read as SSE."""
    started, first, usage, chunks = time.perf_counter(), None, None, 0
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:500]!r}")
        async for line in response.aiter_lines():
            data = line.removeprefix("data:").strip()
            if not line.startswith("data:") or data == "[DONE]":
                continue
            chunk = json.loads(data)
            if chunk.get("choices"):
                first = first or time.perf_counter()
                chunks += 1
            usage = chunk.get("usage") or usage
    tokens = usage["completion_tokens"] if usage else chunks
    return Reply((first or time.perf_counter()) - started, tokens)


def completion_body(model_id: str, prompt: list[int], max_tokens: int, temperature: float = 0.0) -> dict:
    return {"model": model_id, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def closed_loop(url: str, bodies: list[list[dict]]) -> Run:
    """Each client sends its bodies one after another; all clients at once."""
    async def client_loop(client: httpx.AsyncClient, own: list[dict]) -> list[Reply]:
        return [await stream_completion(client, body) for body in own]

    # A connection per request: llama-server closes idle keep-alive connections, and a
    # request sent down one it has just closed fails ("Server disconnected").
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(900.0), limits=limits) as client:
        started = time.perf_counter()
        replies = [r for own in await asyncio.gather(*(client_loop(client, own) for own in bodies)) for r in own]
        elapsed = time.perf_counter() - started
    return Run(sum(r.tokens for r in replies) / elapsed, [r.ttft for r in replies], [r.tokens for r in replies])


def ordinary_tokens(gguf: Path) -> np.ndarray:
    """Ids of the vocabulary's normal tokens (GGUF token type 1): no control or byte tokens."""
    import gguf as gguf_lib

    field = gguf_lib.GGUFReader(str(gguf)).fields["tokenizer.ggml.token_type"]
    types = np.concatenate([field.parts[i] for i in field.data])
    return np.flatnonzero(types == 1)


def prompts(tokens: np.ndarray, seed: list[int], shape: tuple[int, ...]) -> np.ndarray:
    """Random prompts, the same for both servers within a round and new in every round, so
    that no prefix cache (Flint's or llama-server's) ever holds one."""
    return np.random.default_rng(seed).choice(tokens, size=shape)


# The rounds and the report.

def load_bodies(args, model_id: str, tokens: np.ndarray, round_index: int, concurrency: int) -> list[list[dict]]:
    shape = (concurrency, args.requests_per_client, args.prompt_tokens)
    ids = prompts(tokens, [args.seed, round_index, concurrency], shape)
    return [[completion_body(model_id, p.tolist(), args.output_tokens, args.temperature) for p in own] for own in ids]


def measure_load(args, server: Server, model_id: str, tokens: np.ndarray, round_index: int, concurrency: int) -> Run:
    run = asyncio.run(closed_loop(server.url, load_bodies(args, model_id, tokens, round_index, concurrency)))
    print(f"  round {round_index + 1}, {server.name}, {concurrency} clients: {run.tokens_per_second:.1f} tok/s, "
          f"TTFT median {statistics.median(run.ttfts):.2f} s", flush=True)
    if set(run.tokens) != {args.output_tokens}:  # a figure over fewer tokens would flatter its server
        print(f"  warning: {server.name} answered {sorted(set(run.tokens))} tokens, not {args.output_tokens}")
    return run


def measure_ttft(args, server: Server, model_id: str, tokens: np.ndarray, round_index: int) -> float:
    """Time to first token of one long prompt, alone on the server."""
    long_prompt = prompts(tokens, [args.seed, round_index, 0], (args.ttft_prompt_tokens,)).tolist()
    return asyncio.run(closed_loop(server.url, [[completion_body(model_id, long_prompt, 1)]])).ttfts[0]


def flint_turn(args, binary: Path, scratch: Path, source, tokens: np.ndarray, round_index: int) -> tuple[dict, Server]:
    """One Flint server (its default --max-num-seqs raised to the largest concurrency) for every load."""
    with ExitStack() as stack:
        server = start_one("Flint", args, binary, stack, scratch)
        warm_up(server, source.id, tokens)
        with failure_log(server):
            figures = {n: measure_load(args, server, source.id, tokens, round_index, n) for n in args.concurrency}
            figures["ttft"] = measure_ttft(args, server, source.id, tokens, round_index)
        server.rss_after_load = rss_at_rest(server)
    return figures, server


def llama_turn(args, binary: Path, scratch: Path, source, tokens: np.ndarray, round_index: int) -> tuple[dict, Server]:
    """A llama-server per concurrency, with as many slots, and one with a single slot for the
    long prompt. The server returned (for its start-up and memory) is the largest one. With
    --llama-slots, one server of that many slots for every concurrency instead."""
    figures, largest = {}, None
    for slots in [args.llama_slots] if args.llama_slots else args.concurrency:
        with ExitStack() as stack:
            server = start_one("llama-server", args, binary, stack, scratch, slots)
            warm_up(server, source.id, tokens)
            with failure_log(server):
                for clients in args.concurrency if args.llama_slots else [slots]:
                    figures[clients] = measure_load(args, server, source.id, tokens, round_index, clients)
            server.rss_after_load = rss_at_rest(server)
            largest = server if slots == (args.llama_slots or max(args.concurrency)) else largest
    with ExitStack() as stack:
        server = start_one("llama-server", args, binary, stack, scratch, 1)
        with failure_log(server):
            figures["ttft"] = measure_ttft(args, server, source.id, tokens, round_index)
    return figures, largest


SETTLE_SECONDS = 1.0


def rss_at_rest(server: Server) -> int:
    """The larger of the memory once healthy and after the load, read SETTLE_SECONDS after the
    last response, both servers alike: what a server holds at rest, not as its last request
    is torn down (Flint hands freed heap pages back once its engine runs out of work,
    engine/host/heap.py)."""
    time.sleep(SETTLE_SECONDS)
    return max(server.rss_bytes, resident_bytes(server.process.pid))


def warm_up(server: Server, model_id: str, tokens: np.ndarray) -> None:
    """One short request, so that no first-touch cost lands in a measured run."""
    asyncio.run(closed_loop(server.url, [[completion_body(model_id, tokens[:16].tolist(), 4)]]))


def run_serve_benchmark(args: argparse.Namespace) -> None:
    """Start both servers, run the alternating rounds, print the report (and with --plot,
    save it and its figures); the servers stop however this ends (an error, Ctrl-C or SIGTERM)."""
    source = resolve_model(args.model)
    if source.format != "gguf":
        raise SystemExit(f"{source.path}: llama-server needs a GGUF file")
    tokens = ordinary_tokens(source.path)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally that stops the servers
    binary = find_llama_server(args.llama_server)
    # llama.cpp's threads spin: other work on the machine cuts its figures several times over.
    header = (f"model: {source.path.name}; llama-server {llama_server_version(binary)} (llama-cpp-python "
              f"{LLAMA_CPP_PYTHON_VERSION}), {usable_cores()} threads, "
              f"{f'{args.llama_slots} slots' if args.llama_slots else 'as many slots as clients'}; "
              f"load average {os.getloadavg()[0]:.1f} before the servers started")
    with tempfile.TemporaryDirectory(prefix="flint-bench-") as scratch:
        with ExitStack() as stack:  # Flint's first start compiles everything: the cold start
            cold_start = start_one("Flint", args, binary, stack, Path(scratch)).healthy_after
        results: dict[str, list[dict]] = {name: [] for name in SERVERS}
        servers: dict[str, Server] = {}
        for round_index in range(args.rounds):
            for name, turn in (("Flint", flint_turn), ("llama-server", llama_turn)):
                figures, servers[name] = turn(args, binary, Path(scratch), source, tokens, round_index)
                results[name].append(figures)
    summary = summarize(args, servers, results, model=source.path.name, setup=header, cold_start=cold_start)
    print_report(summary)
    if args.plot:
        from tools.bench.plot import save_plots

        for path in save_plots(summary, args.plot):
            print(f"wrote {path}")
