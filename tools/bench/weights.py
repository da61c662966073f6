"""`tools/bench.py weights`: how long `LLM.update_weights` takes on `flint serve`'s defaults,
against the roofline of the bytes it must move (the new float32 weights read, the served
ones written) at the memory bandwidth measured in the same run, and against what a restart
on the new weights would cost instead (the engine built and compiled again)."""

from __future__ import annotations

import argparse
import time


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=5, help="timed updates after the first (default: %(default)s)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--model", default=None, help="a GGUF file or checkpoint (default: the embedded SmolLM2)")


def weights_benchmark(args: argparse.Namespace) -> None:
    import jax

    from engine.device.compile_cache import CompileCounter
    from engine.loader.checkpoint import load_checkpoint
    from flint import LLM
    from tools.bench.roofline import memory_bandwidth

    started = time.perf_counter()
    llm = LLM(args.model, max_model_len=args.max_model_len)
    restart = time.perf_counter() - started
    params = jax.device_put(load_checkpoint(args.model).params)  # as a trainer holds them: arrays on the device
    read = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    written = sum(leaf.nbytes for leaf in jax.tree.leaves(llm.engine.runner.state))

    def update() -> float:
        start = time.perf_counter()
        llm.update_weights(params)
        jax.block_until_ready(llm.engine.runner.state)
        return time.perf_counter() - start

    first = update()
    with CompileCounter() as compiled:
        times = [update() for _ in range(args.repeats)]
    bandwidth = memory_bandwidth(256 * 2**20, 5)
    config = llm.engine.config
    print(f"update_weights, {llm.engine.model_config.num_layers} layers x {llm.engine.model_config.hidden_size}, "
          f"quantization {config.quantization}, KV cache "
          f"{llm.engine.runner.kv_cache_dtype}, CPU kernels {llm.engine.runner.cpu_kernels}")
    print(f"  first (compiles the relayout): {first:.3f} s; then best {min(times):.3f} s, median "
          f"{sorted(times)[len(times) // 2]:.3f} s over {args.repeats}; {compiled.describe()} after the first")
    print(f"  roofline: {read / 2**20:.0f} MiB read + {written / 2**20:.0f} MiB written at "
          f"{bandwidth / 1e9:.1f} GB/s = {(read + written) / bandwidth:.3f} s")
    print(f"  a restart on new weights instead (load and compile every bucket): {restart:.1f} s")
