"""tools/gpu_check.sh and its parts, on the CPU: the dry run names every step, a failing
step fails the script without stopping it, the benchmark's smoke run records every figure,
the trace summary partitions a step's time, engine parity passes CPU against CPU, and the
HTTP step serves and answers every check."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STEPS = ("environment", "wheels", "kernel tests", "engine parity", "serve", "benchmark", "report")


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
    assert f"-m tools.gpu.bench --out {out}" in result.stdout
    assert not out.exists()


def test_a_failing_step_fails_the_script_and_the_next_steps_still_run(tmp_path):
    result = run("tools/gpu_check.sh", "--only", "benchmark", "--out", str(tmp_path), env={"PYTHON": "false"})
    assert result.returncode == 1
    steps = [line.split("\t")[:2] for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert steps == [["environment", "fail"], ["wheels", "fail"], ["benchmark", "fail"]]


def test_benchmark_smoke_records_every_figure(tmp_path):
    from tools.gpu.bench import SETTINGS, metric_keys

    result = run(sys.executable, "-m", "tools.gpu.bench", "--smoke", "--out", str(tmp_path))
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
    from tools.gpu.trace import categorise, hlo_categories, sweep

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
  %copy.4 = f32[4,4]{1,0} copy(%a), metadata={op_name="jit(step)/while/body/dynamic_slice"}
  ROOT %sort.3 = f32[4,4]{1,0} sort(%exp.2), metadata={op_name="jit(step)/sampling/sort"}
}
"""
    categories = hlo_categories(hlo)
    assert ([categories[name] for name in ("fusion.1", "exp.2", "sort.3", "copy.4")]
            == ["matmul", "attention", "sampling", "copy"])
    assert categorise({"name": "MemcpyD2D", "args": {}}, categories) == "copy"  # the runtime's copies
    covered = sweep([(0, 4, "matmul"), (2, 6, "attention"), (6, 7, "copy"), (7, 8, "other")], (0, 10))
    assert covered == {"attention": 4, "sampling": 0, "matmul": 2, "copy": 1, "other": 1}  # idle: the other 2


def test_engine_parity_passes_cpu_against_cpu(tmp_path):
    result = run(sys.executable, "-m", "tools.gpu.parity", "--platform", "cpu", "--out", str(tmp_path / "parity.json"))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    parity = json.loads((tmp_path / "parity.json").read_text())
    assert parity["passed"] and parity["greedy_device"] == parity["greedy_cpu"]
    assert len(parity["greedy_cpu"]) == 3 and all(len(tokens) == 32 for tokens in parity["greedy_cpu"])
    # bfloat16 was really used (float32 against float32 would agree to ~1e-6) and stays in tolerance.
    assert 1e-4 < parity["bf16_logits_rel_l2"] < parity["tolerance"]


def test_serve_smoke_answers_every_check(tmp_path):
    from tools.gpu.serve import CHECKS

    from engine.device import native

    result = run(sys.executable, "-m", "tools.gpu.serve", "--smoke", "--out", str(tmp_path / "serve.json"), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    serve = json.loads((tmp_path / "serve.json").read_text())
    assert serve["passed"] and serve["dtype"] == "float32"
    assert set(serve["checks"]) == {*CHECKS, "attention"}
    # The CPU's attention: the native kernel where it was built, the jnp reference without it.
    expected = "native_cpu" if native.available() else "reference"
    assert f"serving with {expected} (expected {expected})" in serve["checks"]["attention"]["detail"]


def test_the_environment_step_fails_on_another_jax_than_the_pinned_one(tmp_path):
    fake = tmp_path / "python3"  # this Python, whose jax reports another version to `-c` code
    fake.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then exec {sys.executable} -c "import jax; '
                    f'jax.__version__ = \'0.0.1\'\n$2"; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    result = run("tools/gpu_check.sh", "--smoke", "--only", "report", "--out", str(tmp_path / "out"),
                 env={"PYTHON": str(fake)})
    steps = dict(line.split("\t")[:2] for line in (tmp_path / "out" / "steps.tsv").read_text().splitlines())
    assert steps["environment"] == "fail"
    assert "pinned by pyproject.toml: 0.11.2" in (tmp_path / "out" / "gpu_check.log").read_text()


@pytest.mark.parametrize("script", ["tools/gpu_check.sh", "tools/gpu_wheels.sh"])
def test_scripts_parse(script):
    assert run("bash", "-n", script).returncode == 0
