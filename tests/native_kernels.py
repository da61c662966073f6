"""Whether the native CPU kernels (engine/device/native) were built here.

setup.py builds them as an optional extension, so that a machine without a compiler still
installs Flint and serves through the jnp path: a compile error in them leaves no library
and no failure. Tests that need them skip without them, saying why, unless
$FLINT_TEST_NATIVE_REQUIRED is set (as .ci/run sets it), where they fail instead: CI tests
both paths, and a kernel that stopped building must not pass as a skipped one.
"""

from __future__ import annotations

import os

import pytest

from engine.device import native

REQUIRED_VARIABLE = "FLINT_TEST_NATIVE_REQUIRED"


def require_native_kernels() -> None:
    """Skip the calling test where the kernels were not built (fail where they must be)."""
    if native.available():
        return
    if os.environ.get(REQUIRED_VARIABLE, "").strip() not in ("", "0"):
        pytest.fail(f"the native CPU kernels are required (${REQUIRED_VARIABLE} is set) and were not built:"
                    " see `pip install -e .`'s output for the compiler's error", pytrace=False)
    pytest.skip("the native CPU kernels were not built here")
