"""The three forms of a mixture-of-experts layer's products, timed on this machine's backend.

    python tools/moe_forms.py [--shape qwen3-30b-a3b|small] [--tokens 1 8 64 256 2048]
                              [--dtype bfloat16|float32] [--out FILE.json]

engine/models/moe.py computes the experts' products in one of three forms (`grouped`:
ragged_dot_general; `gathered`: the picked experts' weights gathered; `dense`: every expert,
weighted by the routing) and `experts_mlp` picks one by backend and step size. This times
each form over one layer's random weights at each token count (the median of repeated
jitted calls, after a compile), checks that the forms agree with `dense` (relative L2), and
prints the time to read the weights each form must read at least, as a floor:
- one token reads its k picked experts; many tokens read every expert at most once.
It is what BENCHMARKS.md's MoE tables come from, on the CPU and on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.gpu.bench import copy_bandwidth, median_seconds  # noqa: E402

from engine.config import ModelConfig  # noqa: E402
from engine.models.moe import dense, gathered, grouped, route  # noqa: E402

FORMS = {"grouped": grouped, "gathered": gathered, "dense": dense}
# One layer's experts: Qwen3-30B-A3B (hidden 2048, 128 experts of 768, 8 picked), and a
# small shape for a quick run on the CPU.
SHAPES = {"qwen3-30b-a3b": dict(hidden=2048, experts=128, picked=8, inner=768),
          "small": dict(hidden=256, experts=16, picked=4, inner=128)}


def layer_config(shape: dict) -> ModelConfig:
    return ModelConfig(vocab_size=8, hidden_size=shape["hidden"], intermediate_size=shape["inner"], num_layers=1,
                       num_heads=8, num_kv_heads=8, head_dim=shape["hidden"] // 8, family="qwen3_moe",
                       num_experts=shape["experts"], num_experts_per_tok=shape["picked"],
                       moe_intermediate_size=shape["inner"], norm_topk_prob=True)


def random_weights(shape: dict, dtype, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    e, h, i = shape["experts"], shape["hidden"], shape["inner"]

    def draw(dims, fan_in):
        return jnp.asarray(rng.standard_normal(dims, dtype=np.float32) / np.sqrt(fan_in), dtype)

    return {"router": draw((e, h), h), "we_gate": draw((e, i, h), h), "we_up": draw((e, i, h), h),
            "we_down": draw((e, h, i), i)}


def layer_fn(form, config: ModelConfig):
    def apply(h, weights):
        experts, expert_weights = route(h, weights["router"], config)
        return form(h, weights, config, experts, expert_weights)

    return jax.jit(apply)


def floor_ms(shape: dict, tokens: int, itemsize: int, bandwidth: float) -> float:
    """Milliseconds to read the expert weights a step needs at least, at `bandwidth` B/s."""
    experts_read = min(shape["experts"], tokens * shape["picked"])
    return experts_read * 3 * shape["hidden"] * shape["inner"] * itemsize / bandwidth * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-30b-a3b")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64, 256, 2048])
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shape, dtype = SHAPES[args.shape], jnp.dtype(args.dtype)
    config, weights = layer_config(shape), random_weights(shape, dtype)
    device = jax.devices()[0]
    bandwidth = copy_bandwidth(1 << 30 if device.platform != "cpu" else 1 << 26, 10)
    print(f"{device.device_kind} ({device.platform}), jax {jax.__version__}, {args.shape} {args.dtype}, "
          f"copy {bandwidth / 1e9:.0f} GB/s")
    rows, rng = [], np.random.default_rng(1)
    for tokens in args.tokens:
        h = jnp.asarray(rng.standard_normal((tokens, shape["hidden"]), dtype=np.float32), dtype)
        outputs = {name: layer_fn(form, config)(h, weights) for name, form in FORMS.items()}
        reference = np.asarray(outputs["dense"], np.float32)
        row = {"tokens": tokens, "floor_ms": floor_ms(shape, tokens, dtype.itemsize, bandwidth)}
        for name, form in FORMS.items():
            if name == "gathered" and tokens * shape["picked"] > 4 * shape["experts"]:
                continue  # gathers k experts per token: far more bytes than the weights at this size
            apply = layer_fn(form, config)
            row[f"{name}_ms"] = 1e3 * median_seconds(lambda: jax.block_until_ready(apply(h, weights)), args.repeats)
            error = np.linalg.norm(np.asarray(outputs[name], np.float32) - reference) / np.linalg.norm(reference)
            row[f"{name}_rel_l2"] = float(error)
        rows.append(row)
        print(" ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                       for key, value in row.items()), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": device.device_kind, "platform": device.platform,
                                        "jax": jax.__version__, "shape": args.shape, "dtype": args.dtype,
                                        "copy_bytes_per_s": bandwidth, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
