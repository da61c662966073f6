"""Run in a subprocess with 4 host devices: a mixture of experts' logits over 2 and 4
devices equal one device's (argv[1]: the number of experts)."""

from __future__ import annotations

import json
import sys

import numpy as np
from family_configs import MOE

from engine.config import EngineConfig
from engine.device.runner import ModelRunner, RowPlan
from engine.models.params import random_params

config = MOE["qwen3_moe"].replace(num_experts=int(sys.argv[1]), num_heads=4, num_kv_heads=4)
params = random_params(config, seed=5)
prompt = [int(t) for t in np.random.default_rng(0).integers(0, 96, 21)]


def run(devices: int):
    engine = EngineConfig(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=32, page_size=4, num_pages=40,
                          mesh_shape=(devices,), optimize_compiled_code=False)
    runner = ModelRunner(config, engine, params)
    prefill = runner.hidden_logits([RowPlan(prompt[:20], 0, list(range(1, 7)))])
    decode = runner.hidden_logits([RowPlan(prompt[20:], 20, list(range(1, 7)))])
    return runner, np.concatenate([prefill, decode])


_, single = run(1)
report = {}
for devices in (2, 4):
    runner, logits = run(devices)
    report[str(devices)] = {"relative_error": float(np.max(np.abs(single - logits)) / np.max(np.abs(single))),
                            "we_gate_spec": str(runner.state["layers"]["we_gate"].sharding.spec)}
print(json.dumps(report))
