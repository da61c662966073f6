"""The roofline: this machine's memory bandwidth and matmul rate, measured in the same run as
any figure compared with them (`python tools/bench.py roofline`), and the timing helpers the
benchmarks share."""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path


def timed_calls(run, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `run` (which waits for the device), after one
    warm-up call that compiles."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def best_seconds(run, repeats: int) -> float:
    """The fastest of `repeats` timed calls, after a warm-up."""
    return min(timed_calls(run, repeats))


def memory_bandwidth(num_bytes: int, repeats: int) -> float:
    """Bytes per second read by a reduction over a float32 array of `num_bytes`."""
    import jax
    import jax.numpy as jnp

    data = jnp.ones(num_bytes // 4, dtype=jnp.float32)
    reduce = jax.jit(jnp.sum)
    return num_bytes / best_seconds(lambda: reduce(data).block_until_ready(), repeats)


def matmul_rate(size: int, dtype: str, repeats: int) -> float:
    """Floating-point operations per second of a square matmul."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((size, size), dtype=dtype)
    multiply = jax.jit(jnp.matmul)
    return 2 * size**3 / best_seconds(lambda: multiply(a, a).block_until_ready(), repeats)


def model_bytes(model: str | None) -> tuple[str, int | None]:
    """The served model's id and its parameter count, read from the checkpoint header."""
    from engine.loader.source import resolve_model

    source = resolve_model(model)
    if source.format != "gguf":
        return source.id, None
    import gguf

    reader = gguf.GGUFReader(str(source.path))
    return source.id, sum(int(t.n_elements) for t in reader.tensors)


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{names[0]} x{len(names)}" if names else platform.processor() or "unknown cpu"


def roofline(args: argparse.Namespace) -> None:
    import jax

    device = jax.devices()[0]
    print(f"machine: {platform.machine()}, {cpu_name()}; "
          f"jax {jax.__version__}, device {device.platform}:{device.device_kind}")
    bandwidth = memory_bandwidth(args.bandwidth_mib << 20, args.repeats)
    print(f"memory bandwidth: {bandwidth / 1e9:.1f} GB/s ({args.bandwidth_mib} MiB float32 reduction)")
    for dtype in ("float32", "bfloat16"):
        rate = matmul_rate(args.matmul_size, dtype, args.repeats)
        print(f"matmul {dtype}: {rate / 1e9:.1f} GFLOP/s ({args.matmul_size}^2)")
    model_id, num_params = model_bytes(args.model)
    if num_params:
        weight_bytes = 4 * num_params  # weights are computed in float32 on CPU (DESIGN.md)
        print(f"{model_id}: {num_params / 1e6:.1f} M parameters, {weight_bytes / 2**20:.0f} MiB in float32; "
              f"batch-1 decode ceiling {bandwidth / weight_bytes:.0f} tok/s (weights read once per step)")


def add_roofline_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bandwidth-mib", type=int, default=1024)
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=None, help="checkpoint (default: the embedded SmolLM2)")
