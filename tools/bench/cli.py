"""Benchmarks. Figures go to BENCHMARKS.md with the command, the machine and the date.

    python tools/bench.py roofline     memory bandwidth and matmul rate of the JAX device,
                                       and the decode ceilings they imply for a model
    python tools/bench.py engine       the roofline, then the engine: single-stream decode,
                                       aggregate throughput at several concurrencies, time
                                       to first token, and llama.cpp on the same GGUF when
                                       llama-cpp-python is installed (the `bench` extra)
    python tools/bench.py sampler      the fused sampling step with every feature on, and
                                       with temperature only, against greedy (64 rows)
    python tools/bench.py serve        Flint against llama.cpp's llama-server through HTTP on the
                                       same GGUF: tok/s and time to first token under the same
                                       closed-loop streamed load, start-up time and memory
                                       (builds llama-server once, about 10 minutes on 2 cores);
                                       --plot DIR also writes its figures (tools/bench/plot.py)
    python tools/bench.py start        warm start and idle memory of `flint serve` and
                                       llama-server, each with its default flags, same GGUF
    python tools/bench.py structured   32 streams constrained by a JSON schema against 32 free
                                       streams, through HTTP: what structured output costs
    python tools/bench.py speculative  an echo-heavy chat load with and without predicted
                                       outputs, and with --speculative ngram, through HTTP
    python tools/bench.py lora         decode with 8 LoRA adapters in one batch against the
                                       base alone, in the engine
    python tools/bench.py embed        embeddings per second of the embedded all-MiniLM-L6-v2
                                       at batches of 1, 32 and 256 sentences, against
                                       sentence-transformers on torch's CPU (--peer-python),
                                       and with --servers `flint serve` against llama-server
                                       --embedding through HTTP

The roofline is measured in the same run as any figure it is compared with: a 2-core CI
machine and an H100 differ by three orders of magnitude, so no constant would do.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.config import LAYER_LOOPS
from tools.bench import embed, lora, offline, speculative, start, structured, weights
from tools.bench.roofline import add_roofline_options, roofline


def engine_benchmarks(args: argparse.Namespace) -> None:
    from tools.bench.in_engine import run_engine_benchmarks

    roofline(args)
    run_engine_benchmarks(args)


def sampler_benchmarks(args: argparse.Namespace) -> None:
    from tools.bench.sampler import run_sampler_benchmark

    run_sampler_benchmark(args)


def serve_benchmarks(args: argparse.Namespace) -> None:
    if args.plot:  # before the run of many minutes, not after it
        from tools.bench.plot import require_matplotlib

        require_matplotlib()
        args.plot.mkdir(parents=True, exist_ok=True)
    from tools.bench.serve import run_serve_benchmark

    run_serve_benchmark(args)


def add_engine_options(engine: argparse.ArgumentParser) -> None:
    """`tools/bench.py engine`'s options: the roofline's, and the engine's load."""
    add_roofline_options(engine)
    engine.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    engine.add_argument("--prompt-tokens", type=int, default=128)
    engine.add_argument("--output-tokens", type=int, default=128)
    engine.add_argument("--ttft-prompt-tokens", type=int, default=1000)
    engine.add_argument("--dtype", default="auto", help="compute dtype (auto: float32 on CPU, bfloat16 on GPUs)")
    engine.add_argument("--layer-loop", default="auto", choices=LAYER_LOOPS,
                        help="the forward's loop over the layers (auto: unrolled on GPUs, a scan elsewhere)")
    engine.add_argument("--overlap-steps", action=argparse.BooleanOptionalAction, default=True,
                        help="dispatch the next decode window before the last one's results are back")


def add_sampler_options(sampler: argparse.ArgumentParser) -> None:
    """`tools/bench.py sampler`'s options."""
    sampler.add_argument("--rows", type=int, default=64)
    sampler.add_argument("--vocab", type=int, default=49152)
    sampler.add_argument("--history", type=int, default=2048)
    sampler.add_argument("--repeats", type=int, default=5)
    sampler.add_argument("--decode-step", action=argparse.BooleanOptionalAction, default=True,
                         help="also time a SmolLM2 decode step of as many rows, for the share")
    sampler.add_argument("--decode-context", type=int, default=200,
                         help="cached tokens of each sequence of that decode step (default: %(default)s)")


def add_serve_options(serve: argparse.ArgumentParser) -> None:
    """`tools/bench.py serve`'s options: the model, the load, the servers and the plots."""
    serve.add_argument("--model", default=None, help="a GGUF file (default: the embedded SmolLM2)")
    serve.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64],
                       help="closed-loop clients, one run each (default: %(default)s)")
    serve.add_argument("--requests-per-client", type=int, default=2,
                       help="streamed requests each client sends, one after another (default: %(default)s)")
    serve.add_argument("--prompt-tokens", type=int, default=128)
    serve.add_argument("--output-tokens", type=int, default=128)
    serve.add_argument("--ttft-prompt-tokens", type=int, default=1000)
    serve.add_argument("--rounds", type=int, default=2,
                       help="alternating turns of each server; the best counts (default: %(default)s)")
    serve.add_argument("--seed", type=int, default=0, help="of the random prompts")
    serve.add_argument("--temperature", type=float, default=0.0, help="of every request (default: %(default)s)")
    serve.add_argument("--llama-slots", type=int, default=None, metavar="N",
                       help="one llama-server of N slots for every concurrency (default: one per concurrency, "
                            "with as many slots as clients)")
    serve.add_argument("--llama-server", default=None, metavar="PATH",
                       help="a llama-server binary (default: the one cached under $XDG_CACHE_HOME or ~/.cache, "
                            "in flint/llama-server/VERSION/, built there first if absent)")
    serve.add_argument("--flint-args", default="", help="more `flint serve` arguments, as one string")
    serve.add_argument("--llama-args", default="", help="more llama-server arguments, as one string")
    serve.add_argument("--start-timeout", type=float, default=900.0,
                       help="seconds each server may take to become healthy (default: %(default)s)")
    serve.add_argument("--plot", type=Path, default=None, metavar="DIR",
                       help="also write DIR/results.json, and from it DIR/throughput.png and DIR/ttft.png: "
                            "tok/s and median time to first token against concurrency, per server (matplotlib; "
                            "`python -m tools.bench.plot DIR/results.json` draws them again)")


def command_line() -> argparse.ArgumentParser:
    """A subcommand per benchmark, each with its options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    add_roofline_options(commands.add_parser("roofline", help="device bandwidth and matmul rate"))
    add_engine_options(commands.add_parser("engine", help="roofline, decode, throughput, time to first token"))
    add_sampler_options(commands.add_parser("sampler", help="the full sampling step against greedy"))
    add_serve_options(commands.add_parser("serve", help="Flint against llama-server through HTTP, same GGUF and load"))
    structured.add_options(commands.add_parser("structured", help="JSON-schema streams against free ones through HTTP"))
    speculative.add_options(commands.add_parser("speculative", help="predicted outputs and n-gram drafts "
                                                                    "against plain decoding through HTTP"))
    embed.add_options(commands.add_parser("embed", help="embeddings per second against sentence-transformers"))
    lora.add_options(commands.add_parser("lora", help="decode with 8 LoRA adapters in one batch against the base"))
    weights.add_options(commands.add_parser("weights", help="LLM.update_weights against its roofline and a restart"))
    offline.add_options(commands.add_parser("offline", help="LLM.generate against flint serve through HTTP"))
    start.add_options(commands.add_parser("start", help="warm start and idle memory against llama-server, "
                                                        "each with its defaults"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if args.command is None:  # `make bench` with no arguments: the roofline alone
        args = parser.parse_args(["roofline"])
    run = {"roofline": roofline, "engine": engine_benchmarks, "sampler": sampler_benchmarks,
           "serve": serve_benchmarks, "structured": structured.run_structured_benchmark,
           "speculative": speculative.run_speculative_benchmark, "lora": lora.run_lora_benchmark,
           "embed": embed.embed_benchmark, "weights": weights.weights_benchmark,
           "offline": offline.offline_benchmark, "start": start.start_benchmark}
    run[args.command](args)
    return 0
