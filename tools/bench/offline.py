"""`tools/bench.py offline`: `LLM.generate` over many prompts in this process against the same
prompts sent to `flint serve` through HTTP at once (one client each), on the same machine,
one after the other (never side by side): output tokens per second of each."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0, help="of the random prompts")
    parser.add_argument("--start-timeout", type=float, default=900.0)
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating turns of each way; the best counts (default: %(default)s)")


def offline_benchmark(args: argparse.Namespace) -> None:
    from engine.loader.source import resolve_model
    from tools.bench.serve import ordinary_tokens, prompts

    gguf = resolve_model(None).path
    ids = prompts(ordinary_tokens(gguf), [args.seed, 1], (args.prompts, args.prompt_tokens)).tolist()
    llm = offline_llm(args)
    offline, served = [], []
    for round_index in range(args.rounds):
        offline.append(offline_rate(args, llm, ids))
        gc.collect()
        served.append(served_rate(args, ids))
        print(f"  round {round_index + 1}: in process {offline[-1]:.1f} tok/s, through HTTP {served[-1]:.1f} tok/s",
              flush=True)
    offline, served = max(offline), max(served)
    print(f"{args.prompts} prompts of {args.prompt_tokens} tokens, {args.output_tokens} generated each, greedy, "
          f"--max-num-seqs {args.prompts}, the embedded SmolLM2 on the served defaults")
    print(f"  LLM.generate in process, best of {args.rounds}: {offline:.1f} tok/s")
    print(f"  flint serve through HTTP, {args.prompts} streaming clients at once, best of {args.rounds}: "
          f"{served:.1f} tok/s")
    print(f"  ratio: {offline / served:.2f}x")


def offline_llm(args: argparse.Namespace):
    from flint import LLM

    return LLM(max_num_seqs=args.prompts)


def offline_rate(args: argparse.Namespace, llm, ids: list[list[int]]) -> float:
    from flint import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=args.output_tokens, ignore_eos=True)
    llm.generate(ids[:8], params, use_tqdm=False)  # warm: the host's first steps
    started = time.perf_counter()
    results = llm.generate(ids, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    return sum(len(result.outputs[0].token_ids) for result in results) / elapsed


def served_rate(args: argparse.Namespace, ids: list[list[int]]) -> float:
    from engine.loader.source import resolve_model
    from tools.bench.serve import closed_loop, completion_body
    from tools.bench.server_process import free_port, start_server, wait_for_log

    with TemporaryDirectory() as scratch, ExitStack() as stack:
        port = free_port()
        command = [str(Path(sys.executable).with_name("flint")), "serve", "--port", str(port),
                   "--max-num-seqs", str(args.prompts), "--data-dir", scratch]
        server = start_server("Flint", command, port, Path(scratch) / "flint.log", stack, args.start_timeout)
        wait_for_log(server, "every bucket ready", args.start_timeout)
        model = resolve_model(None).id
        warm = [[completion_body(model, prompt, args.output_tokens)] for prompt in ids[:8]]
        asyncio.run(closed_loop(server.url, warm))
        run = asyncio.run(closed_loop(server.url, [[completion_body(model, prompt, args.output_tokens)]
                                                   for prompt in ids]))
    return run.tokens_per_second
