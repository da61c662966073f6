#!/usr/bin/env bash
# Download, here, the wheels the GPU machines lack into .whl/ (Python 3.12, manylinux x86-64),
# for tools/gpu_check.sh to install there: those machines have no network.
#
#     tools/gpu_wheels.sh            then carry .whl with the run (it is ignored by git)
#
# What the GPU check imports, and what the GPU image already has (its package list: the
# device README's KINDS.md): the engine path (engine.engine, engine.runner, the sampler,
# tokenizer and chat template) imports jax, flax (with optax, msgpack, rich, treescope,
# pyyaml), numpy, ml_dtypes, tokenizers, jinja2 (markupsafe) and llguidance; the kernel
# tests add pytest. Only llguidance is missing there. The rest of pyproject's dependencies
# (litestar, pydantic, uvicorn, sqlalchemy, aiosqlite, asyncpg, prometheus-client, gguf,
# safetensors, orbax) belong to the HTTP server and the checkpoint loaders, which the check
# never imports; the kernel tests run with --noconftest so that tests/conftest.py's store
# fixtures (sqlalchemy, api/) stay unimported. jax, jaxlib, numpy and flax are never carried:
# the image's own builds match its CUDA plugin.
set -euo pipefail
cd "$(dirname "$0")/.."

# name==version: the version this repository's venv runs (pyproject: llguidance>=1.9.1).
WHEELS=(llguidance==1.9.1)
# llguidance 1.9 is built for manylinux 2.31; pip matches each N exactly, so name them all.
PLATFORMS=(manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

platform_args=()
for platform in "${PLATFORMS[@]}"; do platform_args+=(--platform "$platform"); done
mkdir -p .whl
"${PYTHON:-python3}" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platform_args[@]}" -d .whl "${WHEELS[@]}"
ls -l .whl
du -sh .whl
