"""Engine benchmarks for tools/bench.py: decode, throughput, time to first token, llama.cpp."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from engine.config import EngineConfig
from engine.engine import Engine
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.loader.source import resolve_model


def bench_config(args: argparse.Namespace) -> EngineConfig:
    """Room for the largest concurrency at prompt + output tokens, and for the TTFT prompt."""
    max_model_len = max(args.prompt_tokens + args.output_tokens, args.ttft_prompt_tokens + 16)
    max_seqs = max(args.concurrency)
    page_size = 16
    pages = max_seqs * -(-(args.prompt_tokens + args.output_tokens) // page_size)
    return EngineConfig(max_model_len=max_model_len, max_num_seqs=max_seqs, max_num_batched_tokens=512,
                        page_size=page_size, num_pages=max(pages, max_model_len // page_size) + 2,
                        dtype=args.dtype, enable_prefix_caching=False,
                        overlap_steps=getattr(args, "overlap_steps", True),
                        layer_loop=getattr(args, "layer_loop", "auto"))


def random_prompt(rng: np.random.Generator, vocab_size: int, length: int) -> list[int]:
    # Ids from the lower part of the vocabulary: ordinary tokens, no special ones.
    return [int(t) for t in rng.integers(100, min(vocab_size, 30000), length)]


def timed_run(engine: Engine, requests: list[Request]) -> tuple[float, dict[str, list[float]]]:
    """Wall time of the whole run, and each request's token arrival times."""
    arrivals: dict[str, list[float]] = {r.request_id: [] for r in requests}
    started = time.perf_counter()
    for request in requests:
        engine.add_request(request)
    while engine.has_unfinished():
        for output in engine.step():
            arrivals[output.request_id] += [time.perf_counter()] * len(output.new_token_ids)
    return time.perf_counter() - started, arrivals


def requests_for(engine: Engine, args, count: int, tag: str, rng) -> list[Request]:
    sampling = SamplingParams(temperature=0.0)
    stop = StopCriteria(max_tokens=args.output_tokens, ignore_eos=True)
    vocab = engine.model_config.vocab_size
    return [Request(f"{tag}-{i}", random_prompt(rng, vocab, args.prompt_tokens), sampling, stop)
            for i in range(count)]


def single_stream(engine: Engine, args, rng) -> float:
    """Decode tokens per second of one sequence, after its first token."""
    _, arrivals = timed_run(engine, requests_for(engine, args, 1, "single", rng))
    times = next(iter(arrivals.values()))
    return (len(times) - 1) / (times[-1] - times[0])


def aggregate(engine: Engine, args, concurrency: int, rng) -> tuple[float, float]:
    """Output tok/s of `concurrency` simultaneous requests: over the whole run (prefills
    included), and over the decode phase, once every request has its first token."""
    elapsed, arrivals = timed_run(engine, requests_for(engine, args, concurrency, f"c{concurrency}", rng))
    total = sum(len(times) for times in arrivals.values()) / elapsed
    decode_start = max(times[0] for times in arrivals.values())
    decode_end = max(times[-1] for times in arrivals.values())
    decoded = sum(1 for times in arrivals.values() for t in times if t > decode_start)
    return total, decoded / max(decode_end - decode_start, 1e-9)


def time_to_first_token(engine: Engine, args, rng) -> float:
    prompt = random_prompt(rng, engine.model_config.vocab_size, args.ttft_prompt_tokens)
    started = time.perf_counter()
    request = Request("ttft", prompt, SamplingParams(temperature=0.0), StopCriteria(max_tokens=1))
    _, arrivals = timed_run(engine, [request])
    return arrivals["ttft"][0] - started


def llama_cpp_decode(model_path: str, args, rng) -> float | None:
    """llama.cpp's single-stream decode tok/s on the same file and thread count, if installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    threads = os.cpu_count() or 1
    llm = Llama(model_path=model_path, n_ctx=args.prompt_tokens + args.output_tokens + 8,
                n_threads=threads, n_threads_batch=threads, verbose=False)
    tokens = llm.generate(random_prompt(rng, llm.n_vocab(), args.prompt_tokens), temp=0.0)
    next(tokens)  # the prefill and first token are not part of decode
    started = time.perf_counter()
    for _ in range(args.output_tokens - 1):
        next(tokens)
    return (args.output_tokens - 1) / (time.perf_counter() - started)


def run_engine_benchmarks(args: argparse.Namespace) -> None:
    config = bench_config(args)
    started = time.perf_counter()
    engine = Engine.from_model(args.model, config)
    print(f"engine: {config.max_num_seqs} seqs, buckets {list(config.token_buckets)}, {engine.config.dtype}, "
          f"{engine.runner.layer_loop} layer loop; "
          f"load and compile {time.perf_counter() - started:.0f} s")
    rng = np.random.default_rng(0)
    timed_run(engine, requests_for(engine, args, 2, "warm", rng))  # first-touch effects out of the figures
    print(f"single-stream decode: {single_stream(engine, args, rng):.1f} tok/s "
          f"({args.prompt_tokens} prompt, {args.output_tokens} output tokens)")
    for concurrency in args.concurrency:
        total, decode = aggregate(engine, args, concurrency, rng)
        print(f"aggregate at {concurrency} concurrent: {total:.1f} output tok/s over the run, "
              f"{decode:.1f} tok/s in the decode phase")
    print(f"time to first token, {args.ttft_prompt_tokens}-token prompt: {time_to_first_token(engine, args, rng):.2f} s")
    source = resolve_model(args.model)
    if source.format == "gguf":
        rate = llama_cpp_decode(str(source.path), args, rng)
        print("llama.cpp single-stream decode, same GGUF and threads: "
              + (f"{rate:.1f} tok/s" if rate else "llama-cpp-python not installed (pip install -e '.[bench]')"))
