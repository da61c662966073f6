"""Write a random LoRA adapter for a model, in PEFT's format (adapter_config.json and
adapter_model.safetensors, PEFT's tensor names): something to serve with `flint serve
--lora` or load through POST /v1/load_lora_adapter when no trained adapter is at hand, and
the tests' adapters (tests/lora_files.py).

    python tools/make_lora.py /tmp/demo-lora              # for the embedded SmolLM2
    python tools/make_lora.py /tmp/demo-lora --rank 16 --targets q_proj v_proj --model PATH
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from engine.config import LORA_TARGETS, ModelConfig
from engine.loader.lora import projection_shapes

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def random_adapter(config: ModelConfig, rank: int, seed: int, targets=LORA_TARGETS, layers=None,
                   magnitude: float = 0.3) -> dict:
    """{(layer, module): (A [r, in], B [out, r])}, random, large enough to change the outputs
    (PEFT starts B at zero; a trained adapter has moved it)."""
    rng = np.random.default_rng(seed)
    shapes = projection_shapes(config)
    pairs = {}
    for layer in range(config.num_layers) if layers is None else layers:
        for module in targets:
            out, inner = shapes[module]
            a = rng.standard_normal((rank, inner)).astype(np.float32) * magnitude / math.sqrt(inner)
            b = rng.standard_normal((out, rank)).astype(np.float32) * magnitude / math.sqrt(rank)
            pairs[(layer, module)] = (a, b)
    return pairs


def write_adapter(directory: Path, pairs: dict, rank: int, alpha: float, *, rslora: bool = False,
                  extra_config: dict | None = None, base: str = "tiny-random") -> Path:
    """`pairs` saved in PEFT's layout and names; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for (layer, module), (a, b) in pairs.items():
        block = "self_attn" if module in ATTENTION else "mlp"
        key = f"base_model.model.model.layers.{layer}.{block}.{module}"
        tensors[f"{key}.lora_A.weight"], tensors[f"{key}.lora_B.weight"] = a, b
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    targets = sorted({module for _, module in pairs})
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": targets, "bias": "none",
              "use_rslora": rslora, "task_type": "CAUSAL_LM", "base_model_name_or_path": base,
              "fan_in_fan_out": False, "lora_dropout": 0.0, **(extra_config or {})}
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the adapter's directory (made if absent)")
    parser.add_argument("--model", default=None, help="the base checkpoint (default: the embedded SmolLM2)")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=16.0)
    parser.add_argument("--targets", nargs="+", choices=LORA_TARGETS, default=list(LORA_TARGETS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from engine.loader.checkpoint import load_checkpoint  # here: --help needs no model

    checkpoint = load_checkpoint(args.model)
    pairs = random_adapter(checkpoint.config, args.rank, args.seed, tuple(args.targets))
    write_adapter(args.output, pairs, args.rank, args.alpha, base=checkpoint.source.id)
    print(f"wrote a random rank-{args.rank} adapter of {', '.join(args.targets)} for {checkpoint.source.id} "
          f"to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
