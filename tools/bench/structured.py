"""Constrained against free generation through HTTP, for tools/bench.py structured.

One Flint server; N clients send streamed /v1/completions requests one after another, in
alternating rounds: free text (EOS ignored) and a JSON schema (`response_format`) whose
answers are always longer than the token limit, so both kinds of request generate exactly
the same number of tokens from the same random prompts. The figure is the constrained
aggregate tok/s over the free one, each the best of its rounds: what the grammar costs,
masks, matcher updates and the decode windows constrained rows give up included.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

from engine.loader.source import resolve_model
from tools.bench.serve import closed_loop, completion_body, ordinary_tokens, prompts, start_one, warm_up
from tools.bench.server_process import failure_log

# Always longer than any token limit used here: 500 numbers of up to three digits.
LONG_SCHEMA = {"type": "object", "properties": {"readings": {
    "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 500, "maxItems": 500}},
    "required": ["readings"], "additionalProperties": False}
KINDS = ("free", "json_schema")


def bodies(args, model_id: str, tokens, round_index: int, kind: str) -> list[list[dict]]:
    shape = (args.concurrency, args.requests_per_client, args.prompt_tokens)
    ids = prompts(tokens, [args.seed, round_index], shape)
    extra = {"response_format": {"type": "json_schema", "schema": LONG_SCHEMA}} if kind == "json_schema" else {}
    return [[{**completion_body(model_id, p.tolist(), args.output_tokens), **extra} for p in own] for own in ids]


def measure(args, server, model_id: str, tokens, round_index: int, kind: str) -> float:
    run = asyncio.run(closed_loop(server.url, bodies(args, model_id, tokens, round_index, kind)))
    print(f"  round {round_index + 1}, {kind}: {run.tokens_per_second:.1f} tok/s, "
          f"TTFT median {statistics.median(run.ttfts):.2f} s", flush=True)
    if set(run.tokens) != {args.output_tokens}:
        raise SystemExit(f"{kind} answers had {sorted(set(run.tokens))} tokens, not {args.output_tokens}")
    return run.tokens_per_second


def run_structured_benchmark(args: argparse.Namespace) -> None:
    from tools.bench.roofline import cpu_name

    source = resolve_model(args.model)
    tokens = ordinary_tokens(source.path)
    results: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flint-bench-")))
        server = start_one("Flint", serve_args(args), None, stack, scratch)
        warm_up(server, source.id, tokens)
        with failure_log(server):
            for round_index in range(args.rounds):
                for kind in KINDS:
                    results[kind].append(measure(args, server, source.id, tokens, round_index, kind))
    free, constrained = max(results["free"]), max(results["json_schema"])
    print(f"\nmachine: {cpu_name()}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"command: {shlex.join(['python', *sys.argv])}")
    print(f"{args.concurrency} clients, {args.prompt_tokens}-token prompts, {args.output_tokens} output tokens, "
          f"temperature 0, {args.requests_per_client} requests per client; best of {args.rounds} alternating "
          "rounds\n")
    print("| load | tok/s |\n| --- | --- |")
    print(f"| free text (EOS ignored) | {free:.1f} |\n| json_schema | {constrained:.1f} |")
    print(f"| constrained / free | {constrained / free:.2f} |")


def serve_args(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments bench_serve's `flint serve` command reads."""
    return argparse.Namespace(model=args.model, concurrency=[args.concurrency], flint_args=args.flint_args,
                              start_timeout=args.start_timeout)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded SmolLM2)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flint-args", default="", help="more `flint serve` arguments, as one string")
    parser.add_argument("--start-timeout", type=float, default=900.0)
