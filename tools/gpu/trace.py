"""Where one decode step's device time goes: a jax.profiler trace, summed into attention,
matmuls, sampling, copies, other and idle (for tools/gpu/bench.py).

The trace (`create_perfetto_trace=True`: a Perfetto JSON file, read with the standard
library) names each device op by its HLO instruction (`hlo_op`) or, for GPU kernels that
lack it, by the kernel's name. The compiled step's HLO text maps instructions to the JAX
scopes they came from: engine/models/llama.py names `attention` and engine/device/runner.py `sampling`.
A `dot` (or a cuBLAS gemm call, or a fusion holding either) outside those is a matmul;
a device-to-device copy (the runtime's MemcpyD2D, XLA's copy kernels and `copy` ops) is a
copy, the category that caught every layer's weights being copied before its matmuls (issue
24); everything else is other. Idle is the step's wall time, host to host, that no device op
covers. Where ops overlap (streams, nested thunks), each instant counts once, for the
first of CATEGORIES active then.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

CATEGORIES = ("attention", "sampling", "matmul", "copy", "other")
ANNOTATION = "flint_decode_step"
# A dot or convolution op, a cuBLAS call, or a fusion XLA handed to its Triton gemm emitter
# (never an operand's name: those carry no quotes or parentheses of their own).
MATMUL_TEXT = re.compile(r'\s(dot|convolution)\(|custom_call_target="[^"]*(gemm|matmul|cublas)|triton_gemm', re.I)
KERNEL_PATTERNS = (("attention", re.compile(r"mosaic|attention|pallas", re.I)),
                   ("matmul", re.compile(r"gemm|cublas|cutlass|xmma|nvjet|matmul|dot", re.I)),
                   ("copy", re.compile(r"memcpy|^copy", re.I)))
COPY_TEXT = re.compile(r"\s(copy|copy-start)\(")  # an HLO copy, or an asynchronous copy's start
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")
COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
CALLS = re.compile(r"calls=%?([\w.\-]+)")  # a fusion's computation: its ops run inside one kernel
CONTAINER = re.compile(r"\s(while|conditional|call)\(")  # runs other ops, whose events are traced too
OP_NAME = re.compile(r'op_name="([^"]*)"')


class Instruction(NamedTuple):
    op_name: str  # the JAX scopes it came from
    calls: list[str]  # its fused computations
    is_matmul: bool
    is_copy: bool
    is_container: bool  # runs other ops (a loop, a conditional, a call)


def parse_hlo(text: str) -> tuple[dict[str, Instruction], dict[str, list[str]]]:
    """Every instruction by name; per computation, its instructions' names, root last."""
    instructions, computations, current = {}, {}, None
    for line in text.splitlines():
        match = INSTRUCTION.match(line)
        if match and current is not None:
            op_name = OP_NAME.search(line)
            head = line.split("metadata=")[0]
            instructions[match[1]] = Instruction(op_name[1] if op_name else "", CALLS.findall(head),
                                                 bool(MATMUL_TEXT.search(head)), bool(COPY_TEXT.search(head)),
                                                 bool(CONTAINER.search(head)))
            computations[current].append(match[1])
        elif (header := COMPUTATION.match(line)) and "=" not in line.split("(")[0]:
            current = header[1]
            computations[current] = []
    return instructions, computations


def hlo_categories(text: str) -> dict[str, str | None]:
    """Category of every HLO instruction of a compiled program's text; None for loops and
    calls, whose time is their ops' (the CPU traces both)."""
    instructions, computations = parse_hlo(text)

    def holds_matmul(name: str) -> bool:
        instruction = instructions[name]
        return instruction.is_matmul or any(holds_matmul(inner) for called in instruction.calls
                                            for inner in computations.get(called, []))

    def scope(name: str) -> str | None:
        instruction = instructions[name]
        segments = instruction.op_name.split("/")
        for category in ("attention", "sampling"):
            if category in segments:
                return category
        roots = [computations[called][-1] for called in instruction.calls if computations.get(called)]
        return scope(roots[0]) if roots and not instruction.op_name else None

    def category(name: str) -> str | None:
        instruction = instructions[name]
        if instruction.is_container:
            return None
        if instruction.is_copy:
            return "copy"
        return scope(name) or ("matmul" if holds_matmul(name) else "other")

    categories = {name: category(name) for name in instructions}
    # XLA's GPU kernels are named after their fusion with '_' for '.' and '-' (loop_add_fusion_3),
    # which is all a kernel launched from a command buffer (a CUDA graph) is traced by.
    aliases = {re.sub(r"[.\-]", "_", name): category for name, category in categories.items()}
    return {**aliases, **categories}


def device_events(events: list[dict]) -> list[dict]:
    """The device's op events: on a GPU, the kernels on its streams (else its events that
    name an HLO op: not the lines that span whole modules or steps, which would hide idle
    time); on the CPU, which has no device process, the XLA thunks that name an HLO op."""
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name")}
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    on_device = [e for e in complete if names.get((e["pid"], None), "").startswith("/device:")]
    streams = [e for e in on_device if "stream" in names.get((e["pid"], e.get("tid")), "").lower()]
    with_op = [e for e in (on_device or complete) if "hlo_op" in e.get("args", {})]
    return streams or with_op or on_device


def categorise(event: dict, categories: dict[str, str | None]) -> str | None:
    op = event.get("args", {}).get("hlo_op") or event["name"]
    if op in categories:
        return categories[op]
    for category, pattern in KERNEL_PATTERNS:
        if pattern.search(event["name"]):
            return category
    return "other"


def sweep(intervals: list[tuple[float, float, str]], window: tuple[float, float]) -> dict[str, float]:
    """Microseconds of `window` covered by each category (the first of CATEGORIES active wins)."""
    start, end = window
    points = []
    for begin, finish, category in intervals:
        begin, finish = max(begin, start), min(finish, end)
        if begin < finish:
            points += [(begin, 1, category), (finish, -1, category)]
    points.sort(key=lambda point: (point[0], point[1]))
    covered, active, last = collections.Counter(), collections.Counter(), start
    for at, change, category in points:
        current = next((c for c in CATEGORIES if active[c] > 0), None)
        if current is not None:
            covered[current] += at - last
        active[category] += change
        last = at
    return {category: covered[category] for category in CATEGORIES}


def summarise(events: list[dict], categories: dict[str, str]) -> dict:
    """Shares (percent of wall) of each category and idle over the annotated steps."""
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e["name"] == ANNOTATION]
    ops = device_events(events)
    intervals = [(e["ts"], e["ts"] + e["dur"], categorise(e, categories)) for e in ops]
    intervals = [interval for interval in intervals if interval[2] is not None]
    totals = collections.Counter()
    for window in windows:
        totals.update(sweep(intervals, window))
    wall = sum(end - start for start, end in windows)
    shares = {f"{c}_pct": 100 * totals[c] / wall for c in CATEGORIES}
    shares["idle_pct"] = 100 - sum(shares.values())
    return {**shares, "step_ms": wall / len(windows) / 1e3, "top_ops": top_ops(ops, categories, len(windows))}


def top_ops(ops: list[dict], categories: dict[str, str], steps: int, count: int = 12) -> list[dict]:
    """The ops that took the most time per step, with their category: what to look at next."""
    total = collections.Counter()
    for event in ops:
        if categorise(event, categories) is not None:
            total[event.get("args", {}).get("hlo_op") or event["name"]] += event["dur"]
    return [{"op": name[:80], "us_per_step": round(micros / steps, 1),
             "category": categorise({"name": name, "args": {"hlo_op": name}}, categories)}
            for name, micros in total.most_common(count)]


def trace_steps(step, num_steps: int, keep: Path | None = None) -> list[dict]:
    """Trace events of `num_steps` calls of `step`, each in its own annotation; the trace
    file is copied to `keep` when given."""
    import jax

    with tempfile.TemporaryDirectory() as directory:
        with jax.profiler.trace(directory, create_perfetto_trace=True):
            for _ in range(num_steps):
                with jax.profiler.TraceAnnotation(ANNOTATION):
                    step()
        files = sorted(Path(directory).rglob("perfetto_trace.json.gz")) or sorted(Path(directory).rglob("*.trace.json.gz"))
        if keep is not None:
            keep.write_bytes(files[0].read_bytes())
        trace = json.load(gzip.open(files[0]))
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def decode_step(runner, rows: int, context: int, num_steps: int = 1):
    """A function running `num_steps` compiled one-token decode steps (one device call) of
    `rows` greedy rows at `context` cached tokens each and waiting for them, and the
    compiled executable. The rows write to pages 1 onwards: call it while no request
    holds pages."""
    import jax
    import numpy as np

    from engine.device.sharding import replicated
    from tools.profile_step import greedy_rows

    compiled = runner.programs.compile(runner.config.token_bucket(rows))  # before pack, which takes compiled buckets
    batch = runner.pack(greedy_rows(rows, context, 1, runner.config.page_size))
    device_batch = jax.device_put(batch, replicated(runner.mesh))

    def step():
        results, runner.kv_cache = compiled(runner.state, runner.kv_cache, device_batch, np.int32(num_steps))
        jax.block_until_ready(results)

    return step, compiled


def profile_decode(runner, rows: int, context: int, num_steps: int = 3, keep: Path | None = None) -> dict:
    """Profile `num_steps` one-token decode steps of `rows` rows at `context` tokens each."""
    step, compiled = decode_step(runner, rows, context)
    step()  # first touches out of the trace
    started = time.perf_counter()
    events = trace_steps(step, num_steps, keep)
    summary = summarise(events, hlo_categories(compiled.as_text()))
    return {**summary, "rows": rows, "context": context, "traced_s": time.perf_counter() - started}
