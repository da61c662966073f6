"""Tensor parallelism on a 4-device CPU mesh matches one device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_four_device_mesh_matches_single_device():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    result = subprocess.run([sys.executable, str(HERE / "mesh_check.py")], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] == 4
    assert report["wq_devices"] == 4 and "tp" in report["wq_spec"]  # weights really are split
    assert "tp" in report["cache_spec"]
    assert report["max_relative_error"] < 1e-5
    assert report["per_device_attention_error"] < 1e-5
    assert report["lora_relative_error"] < 1e-5 and report["lora_change"] > 1e-2  # LoRA rows under tensor parallelism
