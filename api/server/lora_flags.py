"""`flint serve`'s LoRA flags: adapters to load at start-up, and the device slots for them."""

from __future__ import annotations

import argparse

from api.server.flag_types import at_least
from engine.config import LORA_TARGETS, EngineConfig

# Slots when --lora names adapters and --max-loras is not given: vLLM's default is 1, which
# serializes a batch of two adapters; 4 mixes a few at the cost of 4 x rank columns a projection.
DEFAULT_MAX_LORAS = 4


def add_lora_arguments(parser: argparse.ArgumentParser) -> None:
    engine = EngineConfig()
    parser.add_argument("--lora", metavar="NAME=PATH", action="append", type=lora_module, default=[],
                        help="serve the PEFT LoRA adapter in directory PATH as model NAME (repeatable); "
                             "more load at run time through POST /v1/load_lora_adapter")
    parser.add_argument("--allow-runtime-lora", action="store_true",
                        help="serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter, which read "
                             "adapter directories on this server and replace what requests of an adapter's "
                             "name run: any API key may call them (default: off, a 403)")
    parser.add_argument("--max-loras", metavar="N", type=at_least(0), default=None,
                        help="adapters on the device at once; a batch mixes them, and the least recently "
                             f"used is evicted for another (default: {DEFAULT_MAX_LORAS} with --lora or --allow-runtime-lora, else 0: "
                             "no adapters)")
    parser.add_argument("--max-lora-rank", metavar="R", type=at_least(1), default=engine.max_lora_rank,
                        help="the largest adapter rank served; every step computes max-loras x this many "
                             "columns per adapted projection (default: %(default)s)")
    parser.add_argument("--lora-target-modules", metavar="MODULE", nargs="+", choices=LORA_TARGETS,
                        default=list(LORA_TARGETS),
                        help="the projections adapters may adapt (default: all of them); fewer make each "
                             "step cheaper, and an adapter of another is refused")


def lora_engine_options(args: argparse.Namespace) -> dict:
    """EngineConfig's LoRA fields from the flags."""
    max_loras = args.max_loras if args.max_loras is not None else (DEFAULT_MAX_LORAS if args.lora or args.allow_runtime_lora else 0)
    if args.lora and not max_loras:
        raise ValueError("--lora needs adapter slots: --max-loras must be at least 1")
    return {"max_loras": max_loras, "max_lora_rank": args.max_lora_rank,
            "lora_targets": tuple(module for module in LORA_TARGETS if module in args.lora_target_modules)}


def lora_module(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, path

