"""tools/gpu_check.sh and its parts, on the CPU: the dry run names every step, a failing
step fails the script without stopping it, the benchmark's smoke run records every figure,
the trace summary partitions a step's time, and engine parity passes CPU against CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

STEPS = ("environment", "wheels", "kernel tests", "engine parity", "benchmark", "report")


def run(*command: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_dry_run_names_every_step_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    result = run("tools/gpu_check.sh", "--dry-run", "--out", str(out))
    assert result.returncode == 0, result.stderr
    for name in STEPS:
        assert f"step: {name}" in result.stdout
    assert "FLINT_KERNEL_MODE=compiled" in result.stdout and "--noconftest" in result.stdout
    assert f"tools/gpu_bench.py --out {out}" in result.stdout
    assert not out.exists()


def test_a_failing_step_fails_the_script_and_the_next_steps_still_run(tmp_path):
    result = run("tools/gpu_check.sh", "--only", "benchmark", "--out", str(tmp_path), env={"PYTHON": "false"})
    assert result.returncode == 1
    steps = [line.split("\t")[:2] for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert steps == [["environment", "fail"], ["wheels", "fail"], ["benchmark", "fail"]]


def test_benchmark_smoke_records_every_figure(tmp_path):
    from gpu_bench import SETTINGS, metric_keys

    result = run(sys.executable, "tools/gpu_bench.py", "--smoke", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "errors" not in record
    expected = metric_keys(SETTINGS["tiny"])
    assert sorted(record["metrics"]) == sorted(expected)
    assert all(math.isfinite(value) for value in record["metrics"].values())
    assert record["metrics"]["copy_bandwidth_gb_s"] > 0 and record["metrics"]["throughput_8_tok_s"] > 0
    for rows in (1, 8):
        shares = [record["metrics"][f"profile_{rows}_{c}_pct"] for c in ("attention", "matmul", "sampling", "other")]
        assert all(share >= 0 for share in shares) and shares[1] > 0  # the projections are matmuls
        assert (tmp_path / f"profile_{rows}.json.gz").exists()
    table = (tmp_path / "gpu_check.md").read_text().splitlines()
    assert table[0] == "| metric | value | target | device | date | command |"
    assert len(table) == 2 + len(expected)
    assert all(line.count(" | ") >= 5 for line in table)


def test_trace_summary_partitions_the_step_by_priority():
    from gpu_trace import hlo_categories, sweep

    hlo = """HloModule step
%fused_dot (p0: f32[4,4], p1: f32[4,4]) -> f32[4,4] {
  %p0 = f32[4,4]{1,0} parameter(0)
  %p1 = f32[4,4]{1,0} parameter(1)
  ROOT %dot.1 = f32[4,4]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY %main (a: f32[4,4]) -> f32[4,4] {
  %a = f32[4,4]{1,0} parameter(0)
  %fusion.1 = f32[4,4]{1,0} fusion(%a, %a), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(step)/dot_general"}
  %exp.2 = f32[4,4]{1,0} exponential(%fusion.1), metadata={op_name="jit(step)/while/body/attention/exp"}
  ROOT %sort.3 = f32[4,4]{1,0} sort(%exp.2), metadata={op_name="jit(step)/sampling/sort"}
}
"""
    categories = hlo_categories(hlo)
    assert (categories["fusion.1"], categories["exp.2"], categories["sort.3"]) == ("matmul", "attention", "sampling")
    covered = sweep([(0, 4, "matmul"), (2, 6, "attention"), (7, 8, "other")], (0, 10))
    assert covered == {"attention": 4, "sampling": 0, "matmul": 2, "other": 1}  # idle: the other 3


def test_engine_parity_passes_cpu_against_cpu(tmp_path):
    result = run(sys.executable, "tools/gpu_parity.py", "--platform", "cpu", "--out", str(tmp_path / "parity.json"))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    parity = json.loads((tmp_path / "parity.json").read_text())
    assert parity["passed"] and parity["greedy_device"] == parity["greedy_cpu"]
    assert len(parity["greedy_cpu"]) == 3 and all(len(tokens) == 32 for tokens in parity["greedy_cpu"])
    # bfloat16 was really used (float32 against float32 would agree to ~1e-6) and stays in tolerance.
    assert 1e-4 < parity["bf16_logits_rel_l2"] < parity["tolerance"]


@pytest.mark.parametrize("script", ["tools/gpu_check.sh", "tools/gpu_wheels.sh"])
def test_scripts_parse(script):
    assert run("bash", "-n", script).returncode == 0
