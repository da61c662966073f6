"""Where one engine step's time goes: a jax.profiler trace of the compiled step, summed by op.

    python tools/profile_step.py --rows 1 --context 200
    python tools/profile_step.py --rows 32 --context 256 --quantization none
    python tools/profile_step.py --rows 4 --prompt-tokens 128

It builds the runner for the embedded model (or --model), packs `rows` decode rows at a
context of `context` tokens (or, with --prompt-tokens, `rows` prompt chunks of that many), times the compiled one-token step (best of --repeats), then
traces --traced more steps and prints the ops that took the most time per step. The op
names are XLA's (a `while` is a loop: the attention's blocks, the layers' scan); the
compiled HLO (`--hlo FILE`) says what each fusion holds. BENCHMARKS.md quotes its output.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def greedy_rows(rows: int, start: int, new: int, page_size: int) -> list:
    """`rows` greedy rows, each computing `new` tokens from position `start` over its own pages:
    decode rows (one token after a context of `start`) or prompt chunks (from position 0)."""
    from engine.device.runner import RowPlan
    from engine.sampling.inputs import RowSampling
    from engine.sampling.params import SamplingParams

    pages = (start + new - 1) // page_size + 1
    sampling = RowSampling(params=SamplingParams(temperature=0.0), seed=0, token_ids=[1] * start,
                           num_prompt_tokens=start, end_token_ids=frozenset())
    return [RowPlan([5 + row] * new, start, list(range(1 + row * pages, 1 + (row + 1) * pages)), sampling)
            for row in range(rows)]


def op_times(trace_dir: str, steps: int) -> list[tuple[str, float, int]]:
    """(op name, ms per step, calls per step) of every complete event in the trace."""
    trace = next(Path(trace_dir).rglob("*.trace.json.gz"))
    events = json.load(gzip.open(trace))["traceEvents"]
    total, calls = collections.Counter(), collections.Counter()
    for event in events:
        if event.get("ph") == "X":
            total[event["name"]] += event["dur"]
            calls[event["name"]] += 1
    return [(name, micros / steps / 1e3, calls[name] // steps) for name, micros in total.most_common()]


def parse_args() -> argparse.Namespace:
    from engine.config import KV_CACHE_DTYPES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--quantization", default="auto", choices=["auto", "none", "int8", "fp8"])
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", *KV_CACHE_DTYPES])
    parser.add_argument("--prompt-tokens", type=int, default=0,
                        help="instead of decode rows: `rows` prompt chunks of this many tokens each (a prefill step)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--traced", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--hlo", default=None, help="write the compiled step's HLO here")
    parser.add_argument("--bucket", type=int, default=0,
                        help="run the step in this bucket of tokens (a bucket's padding), not the least that holds it")
    parser.add_argument("--max-num-seqs", type=int, default=0, help="the engine's (default: --rows)")
    return parser.parse_args()


def compiled_step(args: argparse.Namespace):
    """A function running one compiled one-token step of `args.rows` decode rows, and its label."""
    import jax
    import numpy as np

    from engine.config import EngineConfig
    from engine.device.runner import ModelRunner
    from engine.device.sharding import replicated
    from engine.device.weights import resolve_quantization
    from engine.loader.checkpoint import load_checkpoint
    from engine.loader.source import resolve_model

    source = resolve_model(args.model)
    quantization = resolve_quantization(args.quantization, source.format)
    # A GGUF's own blocks, as `flint serve` keeps them (engine/loader/serving.py).
    checkpoint = load_checkpoint(source, blocks=quantization == "gguf")
    context = max(args.context, args.prompt_tokens)
    pages = args.rows * (context // 16 + 1) + 1
    max_model_len = max(2 * context, 256)
    tokens = args.rows * max(args.prompt_tokens, 1)
    budget = args.bucket or max(tokens, 64)
    config = EngineConfig(max_model_len=max_model_len, max_num_seqs=max(args.rows, args.max_num_seqs, 1),
                          max_num_batched_tokens=budget, num_pages=max(pages, 64, max_model_len // 16 + 2),
                          token_buckets=(args.bucket,) if args.bucket else (),
                          quantization=quantization,
                          kv_cache_dtype=args.kv_cache_dtype)
    runner = ModelRunner(checkpoint.config, config, checkpoint.params)
    rows = (greedy_rows(args.rows, 0, args.prompt_tokens, config.page_size) if args.prompt_tokens
            else greedy_rows(args.rows, args.context, 1, config.page_size))
    batch = runner.pack(rows)
    compiled = runner.programs.compile(batch.num_tokens)
    if args.hlo:
        Path(args.hlo).write_text(compiled.as_text())
    device_batch = jax.device_put(batch, replicated(runner.mesh))

    def step():
        results, runner.kv_cache = compiled(runner.state, runner.kv_cache, device_batch, np.int32(1))
        jax.block_until_ready(results)

    what = (f"{args.rows} prompt chunks of {args.prompt_tokens} tokens" if args.prompt_tokens
            else f"{args.rows} decode rows at context {args.context}")
    label = (f"{checkpoint.source.id}, quantization {config.quantization}, KV cache {runner.kv_cache_dtype}, "
             f"{what} (bucket {batch.num_tokens})")
    return step, label


def best_time(step, repeats: int) -> float:
    step()  # the first call pays for first touches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    import jax

    args = parse_args()
    step, label = compiled_step(args)
    print(f"{label}: best step {best_time(step, args.repeats) * 1e3:.2f} ms")
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            for _ in range(args.traced):
                step()
        ops = [op for op in op_times(trace_dir, args.traced) if not op[0].startswith(("$", "ThunkExecutor"))]
    print("\n| op | ms per step | calls per step |\n| --- | --- | --- |")
    for name, millis, calls in ops[: args.top]:
        print(f"| {name[:60]} | {millis:.2f} | {calls} |")


if __name__ == "__main__":
    main()
