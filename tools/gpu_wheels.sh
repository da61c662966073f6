#!/usr/bin/env bash
# Download, here, the wheels the GPU machines lack into .whl/ (Python 3.12, manylinux x86-64),
# for tools/gpu_check.sh to install there: those machines have no network.
#
#     tools/gpu_wheels.sh            then carry .whl with the run (it is ignored by git)
#
# What the GPU check imports, and what the GPU image already has (its package list: the
# device README's KINDS.md): the engine path imports jax, numpy, ml_dtypes, tokenizers,
# jinja2 and llguidance; the kernel tests add pytest; tools/gpu/serve.py runs `flint serve`
# (litestar, pydantic, uvicorn, sqlalchemy, aiosqlite, asyncpg, prometheus-client, gguf,
# safetensors, orbax) and drives it with the openai SDK. SERVER_WHEELS is what of those, with
# their dependencies, the image lacks (the kernel tests run with --noconftest so that
# tests/conftest.py's fixtures stay unimported). jax, jaxlib and numpy are never
# carried: the image's own builds match its CUDA plugin.
#
# It also writes SmolLM2's tokenizer, from the embedded model, to .whl/tokenizer: the model
# tools/gpu/serve.py writes on the device uses it (the 94 MB GGUF is over what a run carries).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"  # the repository's venv: its versions are the ones carried
SERVER_WHEELS=(llguidance litestar litestar-htmx msgspec multipart polyfactory faker rich-click pydantic
               pydantic-core annotated-types typing-inspection uvicorn sqlalchemy greenlet aiosqlite asyncpg
               gguf openai jiter sniffio truststore httpx2 httpcore2)
# name==version: the version this repository's venv runs.
WHEELS=()
for name in "${SERVER_WHEELS[@]}"; do
    WHEELS+=("$name==$("$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
# llguidance 1.9 is built for manylinux 2.31; pip matches each N exactly, so name them all
# (pure-Python wheels match any of them).
PLATFORMS=(manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

platform_args=()
for platform in "${PLATFORMS[@]}"; do platform_args+=(--platform "$platform"); done
mkdir -p .whl
"$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platform_args[@]}" -d .whl "${WHEELS[@]}"
rm -rf .whl/tokenizer && mkdir -p .whl/tokenizer
"$PYTHON" -c "import sys; sys.path.insert(0, '.'); from tools.gpu.serve import write_embedded_tokenizer; from pathlib import Path; write_embedded_tokenizer(Path('.whl/tokenizer'))"
ls -l .whl .whl/tokenizer
du -sh .whl
