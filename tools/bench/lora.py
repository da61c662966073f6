"""LoRA benchmark for tools/bench.py: decode throughput of a batch whose rows use 8 different
adapters, against the base alone (an engine without adapter slots) and against base rows on
the same engine, on the same prompts. Adapters are random, of the given rank, on every
projection (the dearest case: a step computes max-loras x rank columns per projection)."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np

from engine.config import LORA_TARGETS
from engine.engine import Engine
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.loader.lora import LoraAdapter, load_lora
from tools.bench.in_engine import bench_config, random_prompt, timed_run
from tools.make_lora import random_adapter as random_pairs
from tools.make_lora import write_adapter


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="checkpoint (default: the embedded SmolLM2)")
    parser.add_argument("--adapters", type=int, default=8, help="adapters in the batch, and slots (default: %(default)s)")
    parser.add_argument("--rank", type=int, default=8, help="each adapter's rank, and --max-lora-rank (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each case; the best counts (default: %(default)s)")
    parser.set_defaults(ttft_prompt_tokens=16, dtype="auto")


def random_adapter(name: str, engine: Engine, rank: int, seed: int, directory: Path) -> LoraAdapter:
    """A random adapter of every projection, written and read back as PEFT files."""
    pairs = random_pairs(engine.model_config, rank, seed, magnitude=0.01)
    return load_lora(name, write_adapter(directory / name, pairs, rank, 2.0 * rank), engine.model_config)


def decode_rate(engine: Engine, prompts: list[list[int]], adapters: list[LoraAdapter | None], args) -> float:
    """Output tok/s of the decode phase, once every request has its first token."""
    stop = StopCriteria(max_tokens=args.output_tokens, ignore_eos=True)
    tag = time.perf_counter_ns()
    requests = [Request(f"{tag}-{index}", prompt, SamplingParams(temperature=0.0), stop, adapter=adapter)
                for index, (prompt, adapter) in enumerate(zip(prompts, adapters))]
    _, arrivals = timed_run(engine, requests)
    start = max(times[0] for times in arrivals.values())
    end = max(times[-1] for times in arrivals.values())
    return sum(1 for times in arrivals.values() for t in times if t > start) / max(end - start, 1e-9)


def run_lora_benchmark(args: argparse.Namespace) -> None:
    config = bench_config(args)
    lora_config = dataclasses.replace(config, max_loras=args.adapters, max_lora_rank=args.rank,
                                      lora_targets=LORA_TARGETS)
    engines = {"base alone": Engine.from_model(args.model, config),
               "with slots": Engine.from_model(args.model, lora_config)}
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as directory:
        adapters = [random_adapter(f"lora-{index}", engines["with slots"], args.rank, index, Path(directory))
                    for index in range(args.adapters)]
    vocab = engines["base alone"].model_config.vocab_size
    print(f"{args.adapters} adapters of rank {args.rank} on {', '.join(LORA_TARGETS)}; "
          f"{args.prompt_tokens} prompt and {args.output_tokens} output tokens, greedy; best of {args.rounds}")
    for concurrency in args.concurrency:
        prompts = [random_prompt(rng, vocab, args.prompt_tokens) for _ in range(concurrency)]
        mixed = [adapters[index % len(adapters)] for index in range(concurrency)]
        cases = {"base alone": (engines["base alone"], [None] * concurrency),
                 "base rows, slots compiled in": (engines["with slots"], [None] * concurrency),
                 f"{args.adapters} adapters in the batch": (engines["with slots"], mixed)}
        rates = {name: 0.0 for name in cases}
        for _ in range(args.rounds):  # alternating, so drift in the machine touches every case alike
            for name, (engine, row_adapters) in cases.items():
                rates[name] = max(rates[name], decode_rate(engine, prompts, row_adapters, args))
        base = rates["base alone"]
        for name, rate in rates.items():
            print(f"{concurrency} streams, {name}: {rate:.1f} tok/s ({rate / base:.2f}x the base alone)")
