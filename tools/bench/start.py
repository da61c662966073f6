"""`tools/bench.py start`: warm start and idle memory of `flint serve` and llama-server, each
with its own default flags, on the same GGUF, one after the other (never side by side).

Flint starts once cold (an empty data directory), then `--starts` times warm from it: the
seconds from launch to /health 200, the resident memory then, and once every bucket is
compiled, one short completion served and 10 s idle, the resident memory again. llama-server
(`-m GGUF -t CORES`, nothing else: its default context and slots) is measured alike."""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

IDLE_SECONDS = 10.0  # after the request: what the process holds once it has settled
MIB = 2**20


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded SmolLM2)")
    parser.add_argument("--starts", type=int, default=3, help="warm starts of each (default: %(default)s)")
    parser.add_argument("--llama-server", default=None, metavar="PATH",
                        help="a llama-server binary (default: the cached one, built first if absent)")
    parser.add_argument("--start-timeout", type=float, default=900.0)


def start_benchmark(args: argparse.Namespace) -> None:
    from engine.config import usable_cores
    from engine.loader.source import resolve_model
    from tools.bench.llama_server import find_llama_server, llama_server_env

    gguf = resolve_model(args.model).path
    binary = find_llama_server(args.llama_server)
    with tempfile.TemporaryDirectory() as scratch:
        flint = [str(Path(sys.executable).with_name("flint")), "serve", "--data-dir", scratch,
                 *(["--model", args.model] if args.model else [])]
        cold = measured_start("Flint", flint, args, Path(scratch), settle_log="every bucket ready")
        print(f"Flint cold: healthy after {cold[0]:.2f} s", flush=True)
        flint_starts = [measured_start("Flint", flint, args, Path(scratch), settle_log="every bucket ready")
                        for _ in range(args.starts)]
        llama = [str(binary), "-m", str(gguf), "-t", str(usable_cores())]
        llama_starts = [measured_start("llama-server", llama, args, Path(scratch), env=llama_server_env(binary))
                        for _ in range(args.starts)]
    report(args, gguf, flint_starts, llama_starts)


def measured_start(name: str, command: list[str], args: argparse.Namespace, scratch: Path,
                   settle_log: str | None = None, env: dict | None = None) -> tuple[float, int, int]:
    """(seconds to healthy, resident bytes then, resident bytes idle after one request)."""
    from tools.bench.server_process import free_port, resident_bytes, start_server, wait_for_log

    port = free_port()
    flags = ["--port", str(port)] + (["--host", "127.0.0.1"] if name == "llama-server" else [])
    with ExitStack() as stack:
        server = start_server(name, command + flags, port, scratch / f"{name}.log", stack, args.start_timeout, env)
        if settle_log:
            wait_for_log(server, settle_log, args.start_timeout)
        one_completion(server.url)
        time.sleep(IDLE_SECONDS)
        idle = resident_bytes(server.process.pid)
        print(f"  {name}: healthy after {server.healthy_after:.2f} s, {server.rss_bytes / MIB:.0f} MiB then, "
              f"{idle / MIB:.0f} MiB idle after a request", flush=True)
        return server.healthy_after, server.rss_bytes, idle


def one_completion(url: str) -> None:
    model = httpx.get(f"{url}/v1/models", timeout=60).json()["data"][0]["id"]
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}
    httpx.post(f"{url}/v1/completions", json=body, timeout=300).raise_for_status()


def report(args: argparse.Namespace, gguf: Path, flint: list, llama: list) -> None:
    import platform

    median = lambda rows, index: statistics.median(row[index] for row in rows)
    print(f"\nmodel: {gguf.name}; {platform.processor() or platform.machine()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python tools/bench.py start {shlex.join(sys.argv[2:])}; medians of {args.starts} warm starts\n")
    print("| | healthy after (warm) | RSS once healthy | RSS idle after a request |")
    print("| --- | --- | --- | --- |")
    for name, rows in (("Flint", flint), ("llama-server", llama)):
        healthy, idle = median(rows, 1) / MIB, median(rows, 2) / MIB
        print(f"| {name} | {median(rows, 0):.2f} s | {healthy:.0f} MiB | {idle:.0f} MiB |")
    print(f"| Flint / llama-server | | {median(flint, 1) / median(llama, 1):.2f}x | "
          f"{median(flint, 2) / median(llama, 2):.2f}x |")
