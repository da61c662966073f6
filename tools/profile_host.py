"""The engine's host cost per step, measured without an accelerator (issue 47 [2/5], point 1).

A model whose device step costs next to nothing (1 layer, hidden 64, a vocabulary of 512,
random weights, on the CPU) runs N sequences decoding together, so that what a step costs
is the host's: Python and NumPy around the device call. Each stage's time is taken by
wrapping the engine's own methods for the run (nothing in the engine changes):

    schedule    Scheduler.schedule: admission, pages, preemption
    plan        Engine.plan: each row's plan (block table, sampling row, masks)
    pack        ModelRunner.pack: the batch's host arrays
    launch      ModelRunner.launch / launch_next: the transfer to the device and the call
    collect     ModelRunner.collect: waiting for the results and copying them back
    output      OutputStage.process, or a window's engine/host/window_output.py land_window:
                the scheduler's update, stop checks, outputs, of which
      detokenize  IncrementalDetokenizer.push and push_each
      stops       StopStringMatcher.feed and feed_pieces
    masks       GrammarMasks.start (grammar masks for the next step)
    other       the rest of Engine.step

On this CPU the "device" is the same cores: at 256 rows the tiny model's window of 8
steps computes for ~15 ms, partly inline in the launching thread (XLA's CPU runtime runs a
program's first thunks on the caller), so launch and collect carry device time and the
host's stages slow down beside the computation. `--replay-device` takes the device out:
once every row decodes, each launch returns the first decode window's results (its device
arrays, kept) at once, so the wall time is the host's alone, every stage of the engine run
as in serving (the same tokens land each window).

A step here is one call of Engine.step, which runs a window of up to max_decode_steps
decode steps per device call when every row decodes (engine/host/decode_window.py); the
report gives the cost per call, per decode step (a token for every row) and per token of a
row. The device's own time is in it (launch and collect wait for the CPU's computation),
small at this size but not nothing: compare with --max-decode-steps 1. The engine's heap
is settled after its warmup as the server's is (engine/host/heap.py settle_after_load), and
Python's collections land in whichever stage allocates when they start.

    .venv/bin/python tools/profile_host.py --sequences 1 64 256 512
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import platform
import sys
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import EngineConfig, ModelConfig  # noqa: E402
import engine.engine as engine_module  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.host.heap import settle_after_load  # noqa: E402
from engine.device.runner import ModelRunner  # noqa: E402
from engine.device.step_io import InFlight, row_needs  # noqa: E402
from engine.host.output import OutputStage  # noqa: E402
from engine.host.request import Request, SamplingParams, StopCriteria  # noqa: E402
from engine.loader.checkpoint import Checkpoint, load_checkpoint  # noqa: E402
from engine.loader.serving import tokenizer_for  # noqa: E402
from engine.loader.source import ModelSource  # noqa: E402
from engine.models.params import random_params  # noqa: E402
from engine.text.stop_strings import StopStringMatcher  # noqa: E402
from engine.text.detokenizer import IncrementalDetokenizer  # noqa: E402

STAGES = ("schedule", "plan", "pack", "launch", "collect", "output", "detokenize", "stops", "masks", "other")
# Stages inside another: not added again to find "other".
INSIDE = {"detokenize": "output", "stops": "output"}
TINY = ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=1, num_heads=2,
                   num_kv_heads=1, head_dim=32)
PROMPT_TOKENS = 16
MAX_MODEL_LEN = 2048  # room for --repeat runs of --steps windows (their rows' tables as wide as a served context's)


class StageClock:
    """Seconds spent in each stage, from the moment `counting` is set."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counting = False

    def wrap(self, owner, name: str, stage: str, stack: ExitStack) -> None:
        """owner.name (a class's method or an object's) timed as `stage` until `stack` closes."""
        original = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if clock.counting:
                    clock.seconds[stage] += time.perf_counter() - started

        setattr(owner, name, timed)
        stack.callback(setattr, owner, name, original)


@functools.cache
def smollm2_tokenizer():
    """The embedded SmolLM2's tokenizer, read once for every count of sequences."""
    return tokenizer_for(load_checkpoint(None))


def tiny_engine(num_sequences: int, max_decode_steps: int, max_tokens: int = 400) -> Engine:
    """The tiny model's engine, its buckets compiled, room for `num_sequences` rows."""
    gc.unfreeze()  # the last count's engine, frozen by its settle_after_load, is garbage now: not kept
    tokenizer = smollm2_tokenizer()
    checkpoint = Checkpoint(TINY, random_params(TINY, seed=0),
                            ModelSource(id="tiny-host", path=None, format="hf", context_length=MAX_MODEL_LEN))
    budget = max(64, num_sequences)
    pages_per_row = -(-(PROMPT_TOKENS + max_tokens) // EngineConfig.page_size) + 1
    # Two buckets: the decodes' (every row a token) and the prompts'; no other is ever used.
    config = EngineConfig(max_model_len=MAX_MODEL_LEN, max_num_seqs=num_sequences, max_num_batched_tokens=budget,
                          token_buckets=tuple(sorted({num_sequences, budget})), num_pages=max(num_sequences * pages_per_row, MAX_MODEL_LEN // 16) + 40,
                          max_decode_steps=max_decode_steps, quantization="none")
    engine = Engine(checkpoint, tokenizer, config)
    engine.runner.warmup()
    settle_after_load()  # as the server does once its model is loaded (engine/host/heap.py)
    return engine


def requests(num_sequences: int, max_tokens: int) -> list[Request]:
    return [Request(f"r{index}", [(index * 7 + offset) % TINY.vocab_size for offset in range(PROMPT_TOKENS)],
                    SamplingParams(temperature=0.0),
                    StopCriteria(max_tokens=max_tokens, ignore_eos=True, strings=("never said",)))
            for index in range(num_sequences)]


@contextmanager
def clocked(engine: Engine):
    clock = StageClock()
    with ExitStack() as stack:
        clock.wrap(engine.scheduler, "schedule", "schedule", stack)
        clock.wrap(engine, "plan", "plan", stack)
        clock.wrap(engine.runner, "pack", "pack", stack)
        clock.wrap(engine.runner, "launch", "launch", stack)
        clock.wrap(engine.runner, "launch_next", "launch", stack)
        clock.wrap(engine.runner, "collect", "collect", stack)
        clock.wrap(OutputStage, "process", "output", stack)
        clock.wrap(engine_module, "land_window", "output", stack)  # a window's rows at once
        clock.wrap(IncrementalDetokenizer, "push", "detokenize", stack)
        clock.wrap(IncrementalDetokenizer, "push_each", "detokenize", stack)
        clock.wrap(StopStringMatcher, "feed", "stops", stack)
        clock.wrap(StopStringMatcher, "feed_pieces", "stops", stack)
        clock.wrap(engine.masks, "start", "masks", stack)
        yield clock


@contextmanager
def replayed_device(runner: ModelRunner):
    """`runner`'s launches answered at once by the results of the first one made inside."""
    original, kept = runner._launch, {}

    def replay(compiled, rows, batch, device_batch, num_steps, needs=None) -> InFlight:
        if batch.num_tokens not in kept:
            flight = original(compiled, rows, batch, device_batch, num_steps)
            jax.block_until_ready(flight.results)
            kept[batch.num_tokens] = (flight.results, flight.prompt, flight.next_batch)
        return InFlight(rows, batch, num_steps, *kept[batch.num_tokens], needs or row_needs(rows))

    runner._launch = replay
    try:
        yield
    finally:
        runner._launch = original


def measure(num_sequences: int, steps: int, max_decode_steps: int, replay: bool = False,
            repeat: int = 1) -> dict:
    """Host seconds per Engine.step, once every sequence decodes: the fastest of `repeat`
    runs of `steps` steps as the engine runs them, then the fastest of `repeat` with each
    stage timed (the wrappers' own cost is in that run's total, not in the first). On these
    2 shared cores a run is often slowed by something else (XLA's threads, a collection)."""
    # Room for every run, and the steps of decodes that prefilling the last rows takes.
    max_tokens = min((2 * repeat * steps + 4) * max_decode_steps + num_sequences // 8, MAX_MODEL_LEN - PROMPT_TOKENS)
    engine = tiny_engine(num_sequences, max_decode_steps, max_tokens)
    for request in requests(num_sequences, max_tokens=max_tokens):
        engine.add_request(request)
    with ExitStack() as device:
        while engine.scheduler.num_waiting or any(seq.num_output_tokens == 0 for seq in engine.scheduler.running):
            engine.step()  # admit and prefill every sequence first
        if replay:
            device.enter_context(replayed_device(engine.runner))
        for _ in range(2):  # the kept window taken, and the detokenizers' tables filled
            engine.step()
        plain = fastest(timed_run(engine, None, steps) for _ in range(repeat))
        with clocked(engine) as clock:
            staged = fastest(timed_run(engine, clock, steps) for _ in range(repeat))
    return {**plain, "staged": staged}


def fastest(runs) -> dict:
    return min(runs, key=lambda run: run["wall_s"])


def timed_run(engine: Engine, clock: StageClock | None, steps: int) -> dict:
    """`steps` calls of Engine.step: the wall time a step, a decode step and a row's token,
    and with a `clock` each stage's time a step."""
    if clock is not None:
        clock.seconds.clear()
        clock.counting = True
    num_sequences = len(engine.scheduler.running)
    tokens_before = sum(seq.num_output_tokens for seq in engine.scheduler.running)
    started = time.perf_counter()
    for _ in range(steps):
        engine.step()
    wall = time.perf_counter() - started
    tokens = sum(seq.num_output_tokens for seq in engine.scheduler.running) - tokens_before
    decode_steps = tokens / num_sequences  # every row gains a token a decode step
    run = {"sequences": num_sequences, "steps": steps, "tokens": tokens, "wall_s": wall,
           "total_ms_per_step": 1e3 * wall / steps, "ms_per_decode_step": 1e3 * wall / max(decode_steps, 1),
           "us_per_row_token": 1e6 * wall / max(tokens, 1)}
    if clock is not None:
        clock.counting = False
        seconds = dict(clock.seconds)
        seconds["other"] = wall - sum(value for stage, value in seconds.items() if stage not in INSIDE)
        run["ms_per_step"] = {stage: 1e3 * seconds.get(stage, 0.0) / steps for stage in STAGES}
    return run


def table(results: list[dict]) -> str:
    header = ("| sequences | ms a step | ms a decode step | µs a row's token | staged: ms a step | "
              + " | ".join(STAGES) + " |")
    lines = [header, "| " + " | ".join("---" for _ in range(5 + len(STAGES))) + " |"]
    for result in results:
        staged = result["staged"]
        stages = " | ".join(f"{staged['ms_per_step'][stage]:.2f}" for stage in STAGES)
        lines.append(f"| {result['sequences']} | {result['total_ms_per_step']:.2f} | "
                     f"{result['ms_per_decode_step']:.2f} | {result['us_per_row_token']:.1f} | "
                     f"{staged['total_ms_per_step']:.2f} | {stages} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 64, 256, 512])
    parser.add_argument("--steps", type=int, default=20, help="Engine.step calls measured at each count")
    parser.add_argument("--max-decode-steps", type=int, default=EngineConfig.max_decode_steps,
                        help="decode steps a device call may run (1: a call a token)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of --steps at each count; the fastest is shown")
    parser.add_argument("--replay-device", action="store_true",
                        help="answer each launch with the first decode window's results: the host alone")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = [measure(count, args.steps, args.max_decode_steps, args.replay_device, args.repeat)
               for count in args.sequences]
    print(f"machine: {platform.processor() or platform.machine()}; "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; max_decode_steps {args.max_decode_steps}; "
          f"device: {'replayed (the host alone)' if args.replay_device else 'the tiny model, on these cores'}")
    print(f"command: python tools/profile_host.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print("ms a step: one Engine.step (a window of decode steps a device call), the fastest of --repeat runs; "
          "staged: the fastest run with every stage timed (the timers' cost in it), the stages in ms a step, "
          "detokenize and stops inside output")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
