"""The GPU benchmark of issue 13 on a Llama-3-8B-shaped model with random bfloat16 weights.

    python3 -m tools.gpu.bench [--out DIR]          the 8B shape (on a GPU: about 20 GB)
    python3 -m tools.gpu.bench --smoke [--out DIR]  a tiny shape, on the CPU in seconds (tests)

In one run, each figure against what the same run measured of the machine:
- copy bandwidth: a large device-to-device copy, bytes read plus written, median of several;
- batch-1 decode through the Engine: tokens/s, and the step time against the HBM roofline
  (bytes of weights and KV read per step over that bandwidth), as a percentage; the same
  for the device alone (a compiled window of decode steps, no host in between);
- throughput (output tokens/s over the whole run) at each concurrency, 128 prompt and 128
  output tokens each, as tools/bench/in_engine.py measures it;
- time to first token of a 2,048-token prompt;
- a jax.profiler trace of one decode step at 1 and at the largest concurrency: the shares
  of attention, matmuls, sampling, copies, other and idle (tools/gpu/trace.py). Copies over
  MAX_COPY_PCT of a step fail the run: every layer's weights were once copied at every step;
- the layers' matmuls alone (the first 8 layers) through each form of the layer loop, a scan,
  static slices of stacks and arrays of their own, inside a loop of rounds as the engine's
  step, at 1 and at the largest concurrency, against reading their weights once
  (tools/gpu/layer_loop.py);
- the attention kernel alone on decode steps of 1 and 256 sequences at contexts of 512 and
  4,096, in GB/s of keys and values read (tools/gpu/attention.py).
It writes DIR/gpu_check.json and DIR/gpu_check.md after every figure (a run cut short keeps
what it measured) and the traces as DIR/profile_ROWS.json.gz (Perfetto's JSON). DIR is
$OUT when set, else ./gpu-check-out.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

import tools.gpu.attention as gpu_attention
import tools.gpu.layer_loop as gpu_layer_loop
import tools.gpu.report as gpu_report
from engine.device.compile_cache import compilation_cache_dir, use_compilation_cache
from engine.device.sharding import make_mesh, param_shardings
from engine.engine import Engine
from engine.models.params import param_specs, random_device_params
from tools.bench.in_engine import aggregate, bench_config, requests_for, single_stream, time_to_first_token, timed_run
from tools.bench.roofline import timed_calls
from tools.gpu.models import SHAPES, kv_bytes_per_token, random_engine, served_bytes
from tools.gpu.trace import decode_step, profile_decode


@dataclass(frozen=True)
class Settings:
    """What one benchmark run measures, and the engine it builds for it."""

    shape: str  # a key of gpu_models.SHAPES
    dtype: str
    concurrency: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    ttft_prompt_tokens: int
    # Few buckets: each costs a compile of the whole step (the 10-minute budget), and
    # every step of the run fits one: 1 (a stream), each concurrency's decodes, and the
    # step budget, which holds the TTFT prompt in one chunk and max_prefill_rows prompts.
    token_buckets: tuple[int, ...]
    max_prefill_rows: int  # prompts in one prefill step (only the jnp attention unrolls over them)
    copy_mib: int  # of the copied buffer; the copy moves twice as many bytes
    attention_cases: tuple[tuple[int, int], ...]  # (sequences, context) of the kernel's decode timings
    repeats: int = 10
    # XLA's optimizations: off for the smoke run, whose engines compile more than they run
    # (a bucket's compile about halves; the figures are not the point there).
    optimize_compiled_code: bool = True


SETTINGS = {
    # 16 prompts of 128 tokens fill a 2,048-token prefill step.
    "llama3-8b": Settings(shape="llama3-8b", dtype="bfloat16", concurrency=(64, 256), prompt_tokens=128,
                          output_tokens=128, ttft_prompt_tokens=2048, token_buckets=(1, 64, 256, 2048),
                          max_prefill_rows=16, copy_mib=4096,
                          attention_cases=((1, 512), (1, 4096), (256, 512), (256, 4096))),
    # float32, the CPU's fastest dtype: the smoke run checks the plumbing, not bfloat16.
    "tiny": Settings(shape="tiny", dtype="float32", concurrency=(4, 8), prompt_tokens=16, output_tokens=16,
                     ttft_prompt_tokens=64, token_buckets=(1, 8, 64), max_prefill_rows=4, copy_mib=64,
                     attention_cases=((1, 64), (4, 128)), repeats=3, optimize_compiled_code=False),
}
# The device machine keeps /tmp between calls while it stays warm: a benchmark cut short by the
# device tool's 10 minutes leaves its compiled buckets for the next call (the 8B shape's took
# 108-126 s each on an H100, BENCHMARKS.md "Issue 24 [2/6]: the first run on an H100").
GPU_CACHE = "/tmp/flint-gpu-check-cache"
TARGETS = {"decode_b1_roofline_pct": ">= 85 (H100)", "throughput_256_tok_s": ">= 17,000 (H100)",
           "fp8_decode_b1_vs_bf16": ">= 1.7 (H100)", "fp8_throughput_256_vs_bf16": ">= 1.3 (H100)"}
PROFILE_CATEGORIES = ("attention", "matmul", "sampling", "copy", "other", "idle")
MAX_COPY_PCT = 5.0  # of a decode step: more means weights (or the cache) are copied, not read


def metric_keys(settings: Settings) -> list[str]:
    """Every metric a complete run of `settings` records (tests/tools check them)."""
    keys = ["copy_bandwidth_gb_s", "weights_s", "compile_s", "decode_b1_tok_s", "decode_b1_step_ms",
            "decode_b1_roofline_ms", "decode_b1_roofline_pct", "decode_b1_device_step_ms", "decode_b1_device_pct"]
    keys += [f"throughput_{c}_tok_s" for c in settings.concurrency]
    keys += [f"throughput_{c}_decode_tok_s" for c in settings.concurrency]
    keys += ["ttft_s"]
    for rows in profile_rows(settings):
        keys += [f"profile_{rows}_step_ms"] + [f"profile_{rows}_{c}_pct" for c in PROFILE_CATEGORIES]
    for rows, context in settings.attention_cases:
        keys += [f"attention_{rows}x{context}_ms", f"attention_{rows}x{context}_gb_s"]
    keys += ["layers_read_ms"]
    for form in gpu_layer_loop.FORMS:
        keys += [f"layers_{form}_compile_s"] + [f"layers_{form}_{rows}_ms" for rows in profile_rows(settings)]
    most = max(settings.concurrency)
    keys += ["fp8_weights_s", "fp8_compile_s", "fp8_decode_b1_tok_s", "fp8_decode_b1_vs_bf16",
             f"fp8_throughput_{most}_decode_tok_s", f"fp8_throughput_{most}_vs_bf16"]
    return keys


def profile_rows(settings: Settings) -> tuple[int, ...]:
    return (1, max(settings.concurrency))


def median_seconds(run, repeats: int) -> float:
    """Median of `repeats` timed calls of `run` (which waits for the device), after a warm-up."""
    return float(np.median(timed_calls(run, repeats)))


def copy_bandwidth(num_bytes: int, repeats: int) -> float:
    """Bytes per second of a device-to-device copy (a jitted `copy` stays an XLA copy),
    counting the bytes read and the bytes written. The buffer holds a ramp, not zeros."""
    source = jax.numpy.arange(num_bytes // 4, dtype=jax.numpy.uint32)
    copy = jax.jit(lambda array: array.copy())
    seconds = median_seconds(lambda: copy(source).block_until_ready(), repeats)
    return 2 * num_bytes / seconds


def engine_args(settings: Settings) -> argparse.Namespace:
    """The fields tools/bench/in_engine.py's helpers read."""
    return argparse.Namespace(concurrency=list(settings.concurrency), prompt_tokens=settings.prompt_tokens,
                              output_tokens=settings.output_tokens, ttft_prompt_tokens=settings.ttft_prompt_tokens,
                              dtype=settings.dtype)


def build_engine(settings: Settings, record: dict, quantization: str = "none") -> Engine:
    """The engine over random weights drawn on the device, every bucket compiled; its
    figures named with the quantization first where it has one (fp8_compile_s)."""
    config = dataclasses.replace(bench_config(engine_args(settings)), token_buckets=settings.token_buckets,
                                 max_num_batched_tokens=settings.token_buckets[-1],
                                 max_prefill_rows=settings.max_prefill_rows, quantization=quantization,
                                 optimize_compiled_code=settings.optimize_compiled_code)
    prefix, what = ("", "") if quantization == "none" else (f"{quantization}_", f", {quantization}")
    model = SHAPES[settings.shape]
    mesh = make_mesh(config)
    started = time.perf_counter()
    cache = compilation_cache_dir()  # filled before the engine's kernel probe writes to it
    warm_cache = cache is not None and Path(cache).is_dir() and any(Path(cache).iterdir())
    params = random_device_params(model, settings.dtype, param_shardings(model, mesh, param_specs(model)))
    engine = random_engine(model, config, params, mesh)
    del params  # the runner holds the fused, served weights; the drawn ones can go
    jax.block_until_ready(engine.runner.state)
    gpu_report.put(record, f"{prefix}weights_s", time.perf_counter() - started,
                   f"random weights drawn on the device{what} (s)")
    seconds = engine.runner.warmup(lambda line: print(line, flush=True))
    source = f", loaded from {cache}, which an earlier call filled" if warm_cache else ""
    gpu_report.put(record, f"{prefix}compile_s", seconds,
                   f"compile of the buckets {list(config.token_buckets)}{what}{source} (s)")
    return engine


def warm(engine: Engine, settings: Settings, rng) -> None:
    """A short run at each concurrency, so every bucket has run once before it is timed."""
    args = dataclasses.replace(settings, prompt_tokens=16, output_tokens=2 * engine.config.max_decode_steps)
    for count in (1, *settings.concurrency):
        timed_run(engine, requests_for(engine, engine_args(args), count, f"warm{count}", rng))


def measure_decode(engine: Engine, settings: Settings, bandwidth: float, record: dict, rng) -> None:
    """Batch-1 decode through the engine and on the device alone, against the roofline."""
    context = settings.prompt_tokens + settings.output_tokens // 2  # the mean over the decode
    step_bytes = served_bytes(engine) + context * kv_bytes_per_token(engine.model_config, settings.dtype)
    roofline_ms = 1e3 * step_bytes / bandwidth
    rate = single_stream(engine, engine_args(settings), rng)
    gpu_report.put(record, "decode_b1_tok_s", rate, "batch-1 decode through the engine (tok/s)")
    gpu_report.put(record, "decode_b1_step_ms", 1e3 / rate, "batch-1 decode step (ms)")
    gpu_report.put(record, "decode_b1_roofline_ms", roofline_ms,
                   f"HBM roofline of that step: {step_bytes / 1e9:.2f} GB of weights and KV (ms)")
    gpu_report.put(record, "decode_b1_roofline_pct", 100 * roofline_ms * rate / 1e3,
                   "batch-1 decode, percent of the HBM roofline", TARGETS["decode_b1_roofline_pct"])
    window = engine.config.max_decode_steps
    step, _ = decode_step(engine.runner, 1, context, num_steps=window)
    device_ms = 1e3 * median_seconds(step, settings.repeats) / window
    gpu_report.put(record, "decode_b1_device_step_ms", device_ms,
                   f"batch-1 decode step on the device alone, a window of {window} (ms)")
    gpu_report.put(record, "decode_b1_device_pct", 100 * roofline_ms / device_ms,
                   "batch-1 device step, percent of the HBM roofline")


def measure_fp8(settings: Settings, record: dict, rng) -> None:
    """FP8 weights (per-row e4m3, activations per token) against the bfloat16 figures above:
    batch-1 decode and the most sequences' decode, on an engine of their own that compiles
    only the decode buckets (the prompts go through in steps of the largest)."""
    buckets = profile_rows(settings)
    fp8 = dataclasses.replace(settings, token_buckets=buckets, max_prefill_rows=2)
    engine = build_engine(fp8, record, quantization="fp8")
    warm(engine, fp8, rng)
    metrics, most = record["metrics"], max(settings.concurrency)
    rate = single_stream(engine, engine_args(fp8), rng)
    gpu_report.put(record, "fp8_decode_b1_tok_s", rate, "batch-1 decode through the engine, FP8 weights (tok/s)")
    gpu_report.put(record, "fp8_decode_b1_vs_bf16", rate / metrics["decode_b1_tok_s"],
                   "  against bfloat16's", TARGETS["fp8_decode_b1_vs_bf16"])
    _, decode = aggregate(engine, engine_args(dataclasses.replace(fp8, concurrency=(most,))), most, rng)
    gpu_report.put(record, f"fp8_throughput_{most}_decode_tok_s", decode,
                   f"throughput at {most} sequences once all decode, FP8 weights (output tok/s)")
    gpu_report.put(record, f"fp8_throughput_{most}_vs_bf16", decode / metrics[f"throughput_{most}_decode_tok_s"],
                   "  against bfloat16's", TARGETS.get(f"fp8_throughput_{most}_vs_bf16", ""))


def measure_throughput(engine: Engine, settings: Settings, record: dict, rng) -> None:
    for count in settings.concurrency:
        total, decode = aggregate(engine, engine_args(settings), count, rng)
        shape = f"{count} sequences, {settings.prompt_tokens} prompt and {settings.output_tokens} output tokens"
        gpu_report.put(record, f"throughput_{count}_tok_s", total, f"throughput at {shape} (output tok/s)",
                       TARGETS.get(f"throughput_{count}_tok_s", ""))
        gpu_report.put(record, f"throughput_{count}_decode_tok_s", decode,
                       f"throughput at {count} sequences once all have their first token (output tok/s)")


def measure_profiles(engine: Engine, settings: Settings, out_dir: Path, record: dict) -> None:
    context = settings.prompt_tokens + settings.output_tokens // 2
    record["profiles"] = {}
    for rows in profile_rows(settings):
        profile = profile_decode(engine.runner, rows, context, keep=out_dir / f"profile_{rows}.json.gz")
        record["profiles"][str(rows)] = profile
        gpu_report.put(record, f"profile_{rows}_step_ms", profile["step_ms"],
                       f"traced decode step of {rows} rows at {context} tokens, host to host (ms)")
        for category in PROFILE_CATEGORIES:
            gpu_report.put(record, f"profile_{rows}_{category}_pct", profile[f"{category}_pct"],
                           f"  of which {category} (percent of the step)",
                           f"< {MAX_COPY_PCT:g}" if category == "copy" else "")
    copied = {rows: record["metrics"][f"profile_{rows}_copy_pct"] for rows in profile_rows(settings)}
    too_many = {rows: share for rows, share in copied.items() if share > MAX_COPY_PCT}
    if too_many:
        raise RuntimeError(f"device copies take more than {MAX_COPY_PCT:g}% of a decode step: "
                           + ", ".join(f"{share:.1f}% at {rows} rows" for rows, share in too_many.items()))


def measure_attention(engine: Engine, settings: Settings, bandwidth: float, record: dict) -> None:
    """The kernel alone, one layer's decode step, in bfloat16 at the model's head shape."""
    model = engine.model_config
    for rows, context in settings.attention_cases:
        ms, gb_s = gpu_attention.time_decode_attention(rows, context, model.num_heads, model.num_kv_heads,
                                                       model.head_dim, engine.config.page_size, jax.numpy.bfloat16,
                                                       settings.repeats, jax.default_backend() == "gpu")
        shape = f"{rows} sequences at {context} tokens"
        gpu_report.put(record, f"attention_{rows}x{context}_ms", ms, f"attention kernel alone, one layer, {shape} (ms)")
        gpu_report.put(record, f"attention_{rows}x{context}_gb_s", gb_s,
                       f"  its keys and values read (GB/s; the copy measured {bandwidth / 1e9:.0f})")


def measure_layer_loops(engine: Engine, settings: Settings, bandwidth: float, record: dict) -> None:
    layers = min(gpu_layer_loop.TIMED_LAYERS, engine.model_config.num_layers)
    read_ms = 1e3 * gpu_layer_loop.weight_bytes(engine) / bandwidth
    gpu_report.put(record, "layers_read_ms", read_ms,
                   f"the first {layers} layers' projection and MLP weights read once (ms)")
    figures = gpu_layer_loop.time_layer_loops(engine, profile_rows(settings), settings.repeats)
    engine_form = gpu_layer_loop.ENGINE_FORM[engine.runner.layer_loop]
    for key, value in figures.items():
        form, what = key.split("_")[1], key.split("_", 2)[2]
        chosen = " (the engine's)" if form == engine_form else ""
        label = (f"compile of {layers} layers' matmuls, {form} loop (s)" if what == "compile_s" else
                 f"{layers} layers' matmuls alone, {form} loop{chosen}, {what[:-3]} rows (ms)")
        gpu_report.put(record, key, value, label)


def run(settings: Settings, out_dir: Path, command: str) -> dict:
    """Every figure in order of what matters most, the record written after each."""
    record = gpu_report.new_record(command)
    record["settings"] = dataclasses.asdict(settings)
    rng = np.random.default_rng(0)
    save = lambda: gpu_report.write(out_dir, record)  # noqa: E731
    bandwidth = copy_bandwidth(settings.copy_mib << 20, settings.repeats)
    gpu_report.put(record, "copy_bandwidth_gb_s", bandwidth / 1e9,
                   f"device-to-device copy of {settings.copy_mib} MiB, read + written (GB/s)")
    save()
    engine = build_engine(settings, record)
    record["engine"] = {"attention": engine.runner.attention, "layer_loop": engine.runner.layer_loop}
    save()
    warm(engine, settings, rng)
    measures = {
        "decode": lambda: measure_decode(engine, settings, bandwidth, record, rng),
        "throughput": lambda: measure_throughput(engine, settings, record, rng),
        "ttft": lambda: gpu_report.put(record, "ttft_s", time_to_first_token(engine, engine_args(settings), rng),
                                       f"time to first token, {settings.ttft_prompt_tokens}-token prompt (s)"),
        "profiles": lambda: measure_profiles(engine, settings, out_dir, record),
        "layer loops": lambda: measure_layer_loops(engine, settings, bandwidth, record),
        "attention": lambda: measure_attention(engine, settings, bandwidth, record),
        "fp8": lambda: measure_fp8(settings, record, rng),
    }
    for name, measure in measures.items():
        started = time.perf_counter()
        try:
            measure()
        except Exception as error:  # one figure's failure must not cost the others of a rare GPU run
            record.setdefault("errors", {})[name] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        save()
        print(f"measured {name} ({time.perf_counter() - started:.1f} s)", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the tiny shape (CPU, seconds), for tests")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-out"))
    parser.add_argument("--buckets", type=int, nargs="+", default=None, help="token buckets to compile instead")
    parser.add_argument("--compilation-cache", default=None if os.environ.get("FLINT_GPU_BENCH_NO_CACHE") else GPU_CACHE,
                        metavar="DIR", help="keep compiled programs in DIR (default: %(default)s; not with --smoke), "
                        "so that a second call on the same warm machine loads what a first compiled")
    args = parser.parse_args(argv)
    if args.compilation_cache and not args.smoke:
        use_compilation_cache(args.compilation_cache)
    settings = SETTINGS["tiny" if args.smoke else "llama3-8b"]
    if args.buckets:
        settings = dataclasses.replace(settings, token_buckets=tuple(sorted(args.buckets)))
    command = shlex.join(["python3", "-m", "tools.gpu.bench", *(argv if argv is not None else sys.argv[1:])])
    record = run(settings, args.out, command)
    print(gpu_report.markdown(record))
    return 1 if record.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
