"""An engine in this process for one stream at a time: what `flint generate` and
`flint chat --local` run, built from their shared model and device flags."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from api.server.serve import check_tensor_parallel_size, compilation_cache_from_args
from engine.config import EngineConfig

if TYPE_CHECKING:  # JAX loads only when an engine is built
    from engine.engine import Engine
    from engine.loader.progress import Progress


def single_stream_config(args: argparse.Namespace) -> EngineConfig:
    """The engine for one sequence, from --max-model-len and the device flags."""
    # One sequence: its decode steps are one token each, and its prompt goes in chunks of up
    # to 128 tokens. Those two shapes are all it runs, so they are all it compiles (the
    # default buckets would compile seven: a minute more of start-up on a small CPU).
    return EngineConfig(max_model_len=args.max_model_len, max_num_seqs=1, max_num_batched_tokens=128,
                        token_buckets=(1, 128),
                        num_pages=args.max_model_len // 16 + 2, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
                        mesh_shape=(args.tensor_parallel_size,), attention=args.attention,
                        layer_loop=args.layer_loop, cpu_kernels=args.cpu_kernels)


def report_to_stderr(message: str) -> None:
    """The loader's log lines, as the local commands print them."""
    print(f"flint: {message}", file=sys.stderr, flush=True)


def load_local_engine(args: argparse.Namespace, report: Callable[[str], None] = report_to_stderr,
                      progress: Progress | None = None) -> Engine:
    """The model of --model (with --download) on the devices the flags ask for, compiled,
    with its log lines told to `report` and its counts to `progress`. Raises
    ModelNotFoundError or ValueError for flags that cannot be served."""
    from api.server.lifecycle import set_up_compilation_cache
    from engine.engine import Engine
    from engine.loader.source import resolve_model

    check_tensor_parallel_size(args.tensor_parallel_size)
    model = resolve_model(args.model, args.download)
    set_up_compilation_cache(compilation_cache_from_args(args))
    return Engine.from_model(model, single_stream_config(args), report=report, progress=progress)
