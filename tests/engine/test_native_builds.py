"""The native CPU kernels as built for CPUs other than this one.

setup.py builds the kernels for the machine that installs them, so the rest of the suite
tests only the path this CPU takes: here, with AVX512_BF16, products in pairs of bfloat16.
A CPU without it sums in float32 (blocks.h), 16 lanes wide with AVX-512 and 8 with AVX2
alone. Each is built here for such a CPU (-march; this one runs the code of both) and
checked in a process of its own, which loads that build in place of the installed one: the
build says which path it has, its products match the widened weights (Flint's int8, bfloat16,
and a GGUF file's blocks: Q4_0, Q4_K, Q5_K, Q6_K, and Q6_K in a Q4_K stack), and a row's product is the same bits alone
and among 1 to 40 tokens, at any place among them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from native_kernels import require_native_kernels

ROOT = Path(__file__).resolve().parents[2]

# What each build is for, and the path its products take.
BUILDS = {"haswell": "float32, 8 lanes (AVX2)", "icelake-server": "float32, 16 lanes (AVX-512, no AVX512_BF16)"}
BLOCKS = {"haswell": (8, 1), "icelake-server": (16, 1)}
# A GGUF file's blocks over integer inputs (dot.cc) need AVX512-VNNI: Ice Lake has it, without
# AVX512_BF16; Haswell multiplies them over float32 inputs (linear.cc's 4-bit and offset rows).
DOTS = {"haswell": False, "icelake-server": True}

CHECK = r'''
import importlib.util, sys
import engine.device.native as native
spec = importlib.util.spec_from_file_location("engine.device.native._cpu_kernels", sys.argv[1])
library = importlib.util.module_from_spec(spec)
spec.loader.exec_module(library)
sys.modules["engine.device.native._cpu_kernels"] = library
native._cpu_kernels = library
import jax
import jax.numpy as jnp
import numpy as np
from engine.device.native import ops
from engine.device.integer_weight import Int8Weight, dequantize
from engine.device.weights import HEAD_GROUP_SIZE, quantize_int8

assert native.available() and not native.products_in_pairs(), "the build runs products in pairs"
print("blocks:", native.block_shape())
rng = np.random.default_rng(0)
matrix = jnp.asarray(rng.standard_normal((2, 48, 576)).astype(np.float32))
weights = {"int8": quantize_int8(matrix), "int8 head": quantize_int8(matrix[:1], HEAD_GROUP_SIZE),
           "bfloat16": matrix[0].astype(jnp.bfloat16)}
# A GGUF file's blocks: 4-bit with and without offsets, 6-bit with and without, groups of 16.
from gguf_block_files import kept_weight
from engine.loader.gguf_blocks import blocks_of
import gguf
for qtype in ("Q4_0", "Q4_K", "Q5_K", "Q6_K"):
    kind = getattr(gguf.GGMLQuantizationType, qtype)
    weights[qtype] = blocks_of(kept_weight(kind, (48, 768), seed=1)[0], kind, (48, 768))
# A Q4_K_M stack's layer of Q6_K, 6-bit from 0 beside Q4_K (weights.py `alike`).
from engine.device.integer_weight import alike
weights["Q6_K among Q4_K"] = jax.tree.map(lambda *parts: np.stack(parts), *alike([weights["Q6_K"], weights["Q4_K"]]))
print("integer dots:", native.integer_dots())
rows = rng.standard_normal((3, 768)).astype(np.float32)
for kind, weight in weights.items():
    width = weight.shape[-1]
    native_weight = ops.at_layer(ops.packed(weight), 0)
    widened = (dequantize(jax.tree.map(lambda part: part[0] if part.ndim == 3 else part, weight))
               if isinstance(weight, Int8Weight) else weight.astype(jnp.float32))
    alone = np.stack([np.asarray(ops.linear(jnp.asarray(row[None, :width]), native_weight))[0] for row in rows])
    expected = jnp.asarray(rows[:, :width]).astype(jnp.bfloat16).astype(jnp.float32) @ widened.T
    # Two int8 digits of the inputs (dot.cc) are a little further from them than bfloat16.
    tolerance = 2e-4 if getattr(weight, "integer_dots", False) and native.integer_dots() else 1e-5
    np.testing.assert_allclose(alone, np.asarray(expected), rtol=tolerance, atol=10 * tolerance, err_msg=kind)
    for tokens in range(1, 41):
        x = rng.standard_normal((tokens, width)).astype(np.float32)
        where = rng.choice(tokens, size=min(3, tokens), replace=False)
        x[where] = rows[:len(where), :width]
        got = np.asarray(ops.linear(jnp.asarray(x), native_weight))[where]
        assert (got == alone[:len(where)]).all(), f"{kind}: a row's product moved among {tokens} tokens"
print("products: ok")
'''


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    """The kernels' library built for each of BUILDS' CPUs, by setup.py as an install would."""
    require_native_kernels()
    built = {}
    for march in BUILDS:
        out = tmp_path_factory.mktemp(march)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "-j", "2", "--build-lib", str(out / "lib"),
                        "--build-temp", str(out / "temp")], cwd=ROOT, check=True, capture_output=True,
                       env={**os.environ, "FLINT_NATIVE_MARCH": march})
        built[march] = next((out / "lib").rglob("_cpu_kernels*.so"))
    return built


@pytest.mark.parametrize("march", BUILDS)
def test_a_build_without_pairs_sums_each_row_in_one_order(builds, march):
    """Products in float32 (the path `BUILDS` names), checked in a process of their own."""
    result = subprocess.run([sys.executable, "-c", CHECK, str(builds[march])], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    assert result.returncode == 0, f"{march} ({BUILDS[march]}):\n{result.stdout}\n{result.stderr[-3000:]}"
    assert "products: ok" in result.stdout
    assert f"blocks: {BLOCKS[march]}" in result.stdout  # rows a block (the lanes), one input a step
    assert f"integer dots: {DOTS[march]}" in result.stdout
