"""Flint's native CPU kernels (linear.cc, attention.cc, zeros.cc, one library with module.cc), registered with XLA's FFI.

setup.py builds the library at install time with the machine's compiler, as an optional
extension: where it could not be built (no compiler, or a platform it does not compile
on), `available()` is False and the engine serves with the jnp code the kernels replace,
which also stays their reference (tests/engine/test_native_cpu.py). FLINT_NATIVE_CPU=0
hides a built library, so both paths can be run on one machine.
"""

from __future__ import annotations

import functools
import logging
import os

import jax

from engine.config import CPU_KERNELS

log = logging.getLogger("flint")

AUTO, NATIVE, JNP = CPU_KERNELS


@functools.cache
def available() -> bool:
    """Whether the library was built here and its kernels are registered for the CPU."""
    if os.environ.get("FLINT_NATIVE_CPU", "1") == "0":
        return False
    try:
        from engine.device.native import _cpu_kernels
    except ImportError as error:
        log.info("Flint's native CPU kernels are not built (%s): the jnp path serves", error)
        return False
    for name, handler in _cpu_kernels.targets().items():
        jax.ffi.register_ffi_target(name, handler, platform="cpu")
    return True


@functools.cache
def products_in_pairs() -> bool:
    """Whether the build's products run in pairs of bfloat16 (AVX512_BF16, blocks.h), or in
    float32 multiply-adds."""
    if not available():
        return False
    from engine.device.native import _cpu_kernels
    return _cpu_kernels.products_in_pairs()


@functools.cache
def integer_dots() -> bool:
    """Whether a GGUF file's blocks are multiplied over int8 inputs, as ggml does (dot.cc):
    where the build has integer dot products (AVX512-VNNI) and FLINT_NATIVE_DOTS is not 0
    (which keeps them on the bfloat16 products of linear.cc, to measure or compare)."""
    if not available() or os.environ.get("FLINT_NATIVE_DOTS", "1") == "0":
        return False
    from engine.device.native import _cpu_kernels
    return _cpu_kernels.integer_dots()


@functools.cache
def block_shape() -> tuple[int, int]:
    """How the build wants a weight packed (ops.py `packed`): (rows a block, inputs a step):
    (16, 2) with pairs of bfloat16, (16, 1) with AVX-512 alone, (8, 1) with AVX2. None
    where the library is not built."""
    if not available():
        return None
    from engine.device.native import _cpu_kernels
    return tuple(_cpu_kernels.block_shape())


def kernel_paths() -> str:
    """The products this build runs, for the start-up log: a GGUF file's blocks over integer
    inputs or over bfloat16 ones, int8 over bfloat16 pairs or float32, and the lanes."""
    if not available():
        return "no native CPU kernels"
    rows, _ = block_shape()
    floats = "pairs of bfloat16 (AVX512_BF16)" if products_in_pairs() else f"float32, {rows} lanes"
    blocks = "int8 inputs in two digits (AVX512-VNNI)" if integer_dots() else "bfloat16 inputs"
    return f"native CPU kernels: GGUF blocks over {blocks}, int8 over {floats}"


def target_names() -> tuple[str, ...]:
    """The FFI targets the library registers (none where it is not built)."""
    if not available():
        return ()
    from engine.device.native import _cpu_kernels
    return tuple(_cpu_kernels.targets())


def resolve(requested: str, backend: str, mesh_size: int = 1) -> str:
    """What `requested` stands for: NATIVE or JNP. auto is native on a CPU backend with
    one device where the library is built; native asked for where it cannot run fails."""
    if requested not in CPU_KERNELS:
        raise ValueError(f"cpu_kernels must be one of {', '.join(CPU_KERNELS)}, not {requested!r}")
    if requested == JNP:
        return JNP
    problem = (f"the backend is {backend}, not cpu" if backend != "cpu"
               else f"the mesh has {mesh_size} devices (the kernels run on one)" if mesh_size != 1
               else None if available() else "the library was not built (setup.py; FLINT_NATIVE_CPU=0 hides it)")
    if problem is None:
        return NATIVE
    if requested == NATIVE:
        raise ValueError(f"cpu_kernels native cannot run here: {problem}")
    return JNP
