"""Engine parity on a tiny random Llama: the accelerator against the CPU, through ModelRunner
and the whole Engine.

    python3 -m tools.gpu.parity [--platform gpu|cpu] [--out gpu_parity.json]

Two checks, each on the same random weights (tools/gpu/models.py TINY, head_dim 64 so that
`auto` takes the Mosaic GPU kernel on a GPU in bfloat16):
- logits: prompts of ragged lengths in two prefill chunks and a decode step, bfloat16 on
  `--platform` against float32 on the CPU; relative L2 error under LOGITS_TOLERANCE.
- greedy: 32 tokens for each prompt through Engine.generate (scheduler, decode windows,
  the fused sampler), float32 on `--platform` against float32 on the CPU; equal tokens.
With no GPU (`--platform cpu`, the default there) both sides run on the CPU: the bfloat16
logits still go through the tolerance, and the check itself is tested (tests/tools/).
Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import jax
import numpy as np

from engine.config import EngineConfig
from engine.device.runner import ModelRunner, RowPlan
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.models.params import random_params
from tools.gpu.models import TINY, platform_mesh, random_engine

# bfloat16 keeps 8 significant bits (a relative rounding of 2^-9, about 2e-3) and rounds
# weights, activations and the KV cache at every matmul of two layers and the head; the
# kernel's own test allows 1e-2 for attention alone (P rounded before P V). 2e-2 leaves room
# for that while a wrong page, mask or position moves random-model logits by tens of percent.
LOGITS_TOLERANCE = 2e-2
PROMPT_LENGTHS = (37, 64, 5)  # across page edges (16), one page-aligned, one short
NEW_TOKENS = 32
PAGES_PER_PROMPT = 8  # 128 tokens: prompt plus 32 new ones fit


def prompts(seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(2, TINY.vocab_size, length)] for length in PROMPT_LENGTHS]


def table(index: int) -> list[int]:
    return list(range(1 + index * PAGES_PER_PROMPT, 1 + (index + 1) * PAGES_PER_PROMPT))


def engine_config(dtype: str) -> EngineConfig:
    # One token bucket: one compile per engine; 3 rows and up to 106 prompt tokens fit it.
    return EngineConfig(max_model_len=128, max_num_seqs=4, max_num_batched_tokens=128, token_buckets=(128,),
                        page_size=16, num_pages=1 + len(PROMPT_LENGTHS) * PAGES_PER_PROMPT, dtype=dtype)


@contextlib.contextmanager
def on_platform(platform: str, dtype: str):
    """Eager work on `platform`'s device; float32 matmuls at full precision (a GPU would
    otherwise take TF32 for them, and greedy parity would compare precisions, not engines)."""
    precision = "highest" if dtype == "float32" else None
    with jax.default_device(jax.devices(platform)[0]), jax.default_matmul_precision(precision):
        yield


def step_logits(platform: str, dtype: str, params: dict) -> tuple[np.ndarray, str]:
    """Logits of every token of the prompts, fed as two prefill chunks and one decode step,
    and the attention implementation the runner chose."""
    with on_platform(platform, dtype):
        runner = ModelRunner(TINY, engine_config(dtype), params, mesh=platform_mesh(platform))
        steps = [[RowPlan(p[: len(p) // 2], 0, table(i)) for i, p in enumerate(prompts())],
                 [RowPlan(p[len(p) // 2: -1], len(p) // 2, table(i)) for i, p in enumerate(prompts())],
                 [RowPlan(p[-1:], len(p) - 1, table(i)) for i, p in enumerate(prompts())]]
        return np.concatenate([runner.hidden_logits(rows) for rows in steps]), runner.attention


def greedy_tokens(platform: str, params: dict) -> list[list[int]]:
    """NEW_TOKENS greedy tokens for each prompt through the Engine, in float32."""
    with on_platform(platform, "float32"):
        engine = random_engine(TINY, engine_config("float32"), params, mesh=platform_mesh(platform))
        engine.runner.warmup()
        stop = StopCriteria(max_tokens=NEW_TOKENS, ignore_eos=True)
        requests = [Request(f"p{i}", p, SamplingParams(temperature=0.0), stop) for i, p in enumerate(prompts())]
        generated = engine.generate(requests)
        return [generated[request.request_id] for request in requests]


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    if not np.isfinite(actual).all():
        return float("inf")
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def check(platform: str) -> dict:
    """Both checks; a JSON-ready record with `passed`."""
    params = random_params(TINY, seed=1)
    reference, _ = step_logits("cpu", "float32", params)
    logits, attention = step_logits(platform, "bfloat16", params)
    error = relative_error(logits, reference)
    expected_attention = "mosaic_gpu" if platform == "gpu" else "reference"
    ours, theirs = greedy_tokens(platform, params), greedy_tokens("cpu", params)
    same = sum(a == b for ours_row, theirs_row in zip(ours, theirs) for a, b in zip(ours_row, theirs_row))
    result = {
        "platform": platform, "device": jax.devices(platform)[0].device_kind, "jax": jax.__version__,
        "bf16_attention": attention, "bf16_logits_rel_l2": error, "tolerance": LOGITS_TOLERANCE,
        "greedy_tokens_equal": same, "greedy_tokens_total": NEW_TOKENS * len(PROMPT_LENGTHS),
        "greedy_device": ours, "greedy_cpu": theirs,
    }
    result["passed"] = bool(error < LOGITS_TOLERANCE and attention == expected_attention and ours == theirs)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default=None, choices=["gpu", "cpu"],
                        help="where the compared runs go (default: gpu when there is one, else cpu)")
    parser.add_argument("--out", default=None, help="write the result here as JSON")
    args = parser.parse_args(argv)
    platform = args.platform or ("gpu" if jax.default_backend() == "gpu" else "cpu")
    result = check(platform)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"parity on {result['device']} ({platform}): bf16 logits rel L2 {result['bf16_logits_rel_l2']:.2e} "
          f"(< {LOGITS_TOLERANCE}, attention {result['bf16_attention']}); greedy float32 "
          f"{result['greedy_tokens_equal']}/{result['greedy_tokens_total']} tokens equal to the CPU's: "
          + ("PASS" if result["passed"] else "FAIL"))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
