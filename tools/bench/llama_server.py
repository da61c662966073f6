"""llama.cpp's llama-server for tools/bench.py serve, and its llama-quantize for the
benchmarks' Q4_K_M models: found, or built once (together) and cached.

It is built from the llama.cpp that the llama-cpp-python source distribution vendors, at
the version the `bench` extra names, so that the HTTP comparison runs the same llama.cpp as
the engine benchmark's in-process one. The cache is per version and build options: a new pin
or option rebuilds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from engine.config import usable_cores

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # as the `bench` extra in pyproject.toml
# Built for this machine's CPU (ggml's native default), without Intel AMX: on a Xeon that
# has it (a Firecracker VM, 2026-11-27), ggml's AMX matmul ran `tilezero` in a worker thread
# and died of SIGILL as llama-server started. The AVX-512 paths serve instead.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
                 "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
BUILD = f"{LLAMA_CPP_PYTHON_VERSION}-no-amx"  # the cache's folder: a version or option change rebuilds


def cached_llama_server() -> Path:
    """Where a built llama-server is kept: per llama-cpp-python version and build options,
    so a new pin or option rebuilds."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "flint" / "llama-server" / BUILD / "llama-server"


TARGETS = ("llama-server", "llama-quantize")  # built and cached together


def find_llama_server(path: str | None) -> Path:
    """The binary given, else the cached one, else one built now (about 10 minutes on 2 cores)."""
    return Path(path) if path else cached_or_built("llama-server")


def find_llama_quantize() -> Path:
    """llama.cpp's own quantizer, from the same build as llama-server."""
    return cached_or_built("llama-quantize")


def cached_or_built(target: str) -> Path:
    binary = cached_llama_server().with_name(target)
    if not binary.is_file():
        print(f"building {', '.join(TARGETS)} from llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} into "
              f"{binary.parent} (once; about 10 minutes on 2 cores)", flush=True)
        build_llama_server(binary.parent)
    return binary


def quantized_gguf(source: Path, kind: str = "Q4_K_M") -> Path:
    """`source` (an F16 or F32 GGUF) quantized to `kind` by llama-quantize, written beside it
    once (`NAME-Q4_K_M.gguf`)."""
    destination = source.with_name(f"{source.stem.removesuffix('-f16')}-{kind}.gguf")
    if destination.is_file():
        return destination
    quantize = find_llama_quantize()
    partial = destination.with_name(destination.name + ".partial")
    subprocess.run([str(quantize), str(source), str(partial), kind, str(usable_cores())], check=True,
                   env=llama_server_env(quantize))
    partial.rename(destination)
    return destination


def build_commands(source: Path, cores: int) -> list[list[str]]:
    """Configure and build the server and quantizer targets alone. Static, so the binaries
    move freely; no curl or OpenSSL, so the build needs no development headers."""
    return [["cmake", "-S", str(source), "-B", str(source / "build"), "-G", "Ninja", *CMAKE_OPTIONS],
            ["cmake", "--build", str(source / "build"), "--target", *TARGETS, "-j", str(cores)]]


def llama_cpp_source(scratch: str | Path) -> Path:
    """llama.cpp as the pinned llama-cpp-python sdist vendors it, downloaded through pip (the
    ordinary registry client) and extracted into `scratch`."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(scratch)], check=True)
    archive = next(Path(scratch).glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(scratch, filter="data")
    return next(Path(scratch).glob("llama_cpp_python-*/vendor/llama.cpp"))


def build_llama_server(folder: Path) -> None:
    """Download the sdist, build, install every target into `folder`."""
    with tempfile.TemporaryDirectory(prefix="flint-llama-") as scratch:
        source = llama_cpp_source(scratch)
        for command in build_commands(source, usable_cores()):
            subprocess.run(command, check=True)
        for target in TARGETS:
            install_llama_server(source / "build" / "bin" / target, folder / target)


def converted_gguf(model_folder: Path, name: str, python: str) -> Path:
    """`model_folder` (a Hugging Face checkpoint) as a float32 GGUF by llama.cpp's own
    converter from the same sdist, run by `python` (it needs torch and transformers, which
    Flint does not); cached beside llama-server under `name`."""
    destination = cached_llama_server().parent / "gguf" / f"{name}-f32.gguf"
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="flint-llama-") as scratch:
        source = llama_cpp_source(scratch)
        subprocess.run([python, str(source / "convert_hf_to_gguf.py"), str(model_folder), "--outfile", str(partial),
                        "--outtype", "f32"], check=True, env={**os.environ, "PYTHONPATH": str(source / "gguf-py")})
    partial.rename(destination)
    return destination


def install_llama_server(built: Path, destination: Path) -> None:
    """Copy the binary, and any shared libraries it takes from its build directory (a build
    configured with shared libraries), into the cache. Renamed into place last, so an
    interrupted install leaves no binary that looks complete."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    for library in build_libraries(built):
        shutil.copy2(library, destination.parent / library.name)
    partial = destination.with_name(destination.name + ".partial")
    shutil.copy2(built, partial)
    partial.rename(destination)


def build_libraries(binary: Path) -> list[Path]:
    """The shared libraries `ldd` resolves inside the binary's own directory."""
    listing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    found = [line.split("=>")[1].split("(")[0].strip() for line in listing.splitlines() if "=>" in line]
    return [Path(path) for path in found if path and Path(path).resolve().parent == binary.resolve().parent]


def llama_server_env(binary: Path) -> dict[str, str]:
    """The environment to run it in: the libraries of a shared build lie beside it."""
    return {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}


def llama_server_version(binary: Path) -> str:
    """Its `--version` line, e.g. "version: 8185 (1b2d3c4)"."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, env=llama_server_env(binary))
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("version")]
    return lines[0] if lines else "version unknown"
