"""Drafts against plain decoding through HTTP, for tools/bench.py speculative.

An echo-heavy load: chat requests that ask the model to repeat a paragraph with one word
changed, one stream, greedy, sent one after another. Four ways of answering them:

    plain                   a default server, no prediction
    prediction (exact)      the same server, each request predicting its own plain answer
    prediction (original)   the same server, predicting the paragraph as given (what a
                            user editing a file would send: right but for the changed word)
    ngram                   a server started with --speculative ngram, no prediction

Every answer must equal the plain one (drafts change the speed, never the output), so the
figure is tokens per second of identical work. Each server runs alone, and each round
starts both servers afresh: the speed of one server process on this 2-core machine varied
by up to 1.5x from one start to the next (the same requests, the same compiled programs),
so a single start per server could decide the comparison. The best round of each mode counts.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

import httpx

from engine.loader.source import resolve_model
from tools.bench.serve import start_one
from tools.bench.server_process import failure_log, stop_server

PARAGRAPHS = [
    ("The old lighthouse stood at the edge of the cliff, its white paint peeling in the salt wind. Every "
     "evening the keeper climbed the narrow stairs to light the lamp, and every morning he wrote the "
     "weather in a thick book that nobody else ever read.", "evening", "night"),
    ("To install the package, open a terminal and run the install command. Then create a configuration "
     "file in your home directory, set the server address and the port, and restart the service so that "
     "the new settings take effect.", "terminal", "shell"),
    ("Our team met on Monday to plan the next release. We agreed to fix the open bugs first, to write the "
     "missing documentation second, and to leave the new features for the following month.", "Monday",
     "Tuesday"),
    ("The recipe needs two cups of flour, one cup of sugar, three eggs and a pinch of salt. Mix the dry "
     "ingredients, beat in the eggs one at a time, and bake the cake for forty minutes.", "sugar", "honey"),
]


def message(paragraph: str, old: str, new: str) -> list[dict]:
    return [{"role": "user", "content": f'Repeat this text exactly, but replace the word "{old}" with "{new}":'
                                        f"\n\n{paragraph}"}]


def answer(client: httpx.Client, model: str, messages: list[dict], max_tokens: int, **extra) -> tuple[str, int, float]:
    """The reply's text, its completion tokens, and the seconds it took."""
    started = time.perf_counter()
    response = client.post("/v1/chat/completions", json={
        "model": model, "messages": messages, "temperature": 0, "max_completion_tokens": max_tokens, **extra})
    seconds = time.perf_counter() - started
    response.raise_for_status()
    body = response.json()
    return body["choices"][0]["message"]["content"], body["usage"]["completion_tokens"], seconds


def run_mode(client, model: str, args, mode: str, expected: dict[int, str]) -> float:
    """One round of a mode over every paragraph: tok/s, after checking each answer."""
    tokens, seconds = 0, 0.0
    for index, (paragraph, old, new) in enumerate(PARAGRAPHS):
        extra = {}
        if mode == "prediction (exact)":
            extra = {"prediction": {"type": "content", "content": expected[index]}}
        elif mode == "prediction (original)":
            extra = {"prediction": {"type": "content", "content": paragraph}}
        text, count, took = answer(client, model, message(paragraph, old, new), args.output_tokens, **extra)
        if index in expected and text != expected[index]:
            raise SystemExit(f"{mode}: the answer to paragraph {index} differs from the plain one")
        expected.setdefault(index, text)
        tokens, seconds = tokens + count, seconds + took
    rate = tokens / seconds
    print(f"  {mode}: {rate:.1f} tok/s ({tokens} tokens)", flush=True)
    return rate


def server_round(args, stack, scratch: Path, flint_args: str, modes: list[str], expected: dict,
                 results: dict[str, list[float]]) -> None:
    """Start a server with `flint_args`, measure each of `modes` once, and stop it."""
    model = resolve_model(args.model)
    server_args = argparse.Namespace(model=args.model, concurrency=[1], start_timeout=args.start_timeout,
                                     flint_args=flint_args)
    server = start_one("Flint", server_args, None, stack, scratch)
    with failure_log(server), httpx.Client(base_url=server.url, timeout=900.0) as client:
        answer(client, model.id, message(*PARAGRAPHS[0]), 8)  # warm-up: no first-touch cost measured
        for mode in modes:
            results.setdefault(mode, []).append(run_mode(client, model.id, args, mode, expected))
    stop_server(server)


def run_speculative_benchmark(args: argparse.Namespace) -> None:
    from tools.bench.roofline import cpu_name

    results: dict[str, list[float]] = {}
    expected: dict[int, str] = {}
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flint-bench-")))
        for _ in range(args.rounds):
            server_round(args, stack, scratch, args.flint_args,
                         ["plain", "prediction (exact)", "prediction (original)"], expected, results)
            server_round(args, stack, scratch, f"--speculative ngram {args.flint_args}", ["ngram"], expected, results)
    plain = max(results["plain"])
    print(f"\nmachine: {cpu_name()}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"command: {shlex.join(['python', *sys.argv])}")
    print(f"{len(PARAGRAPHS)} chat requests one after another, temperature 0, at most {args.output_tokens} "
          f"tokens; best of {args.rounds} rounds, each starting both servers afresh\n")
    print("| mode | tok/s | speed-up |\n| --- | --- | --- |")
    for mode, rates in results.items():
        print(f"| {mode} | {max(rates):.1f} | {max(rates) / plain:.2f}x |")


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded SmolLM2)")
    parser.add_argument("--output-tokens", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flint-args", default="", help="more `flint serve` arguments, as one string")
    parser.add_argument("--start-timeout", type=float, default=900.0)
