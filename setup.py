"""The build of Flint's one native part: the CPU kernels (engine/device/native/*.cc).

Everything else is in pyproject.toml. The kernels are an optional extension: where the
machine has no C++ compiler the install goes on without them, and the engine serves with
the jnp code they replace (engine/device/native/__init__.py). They are compiled for the
machine that installs them (-march=native), as llama.cpp's own builds are: a .venv is
made where it runs. XLA's FFI headers come from jaxlib, a build requirement at the
version the engine runs, so the kernels' ABI is the runtime's.
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = Path("engine") / "device" / "native"


class BuildWithXlaHeaders(build_ext):
    def build_extensions(self):
        import jaxlib  # only its headers: importing jax would need the build env to hold all of it

        headers = str(Path(jaxlib.__file__).parent / "include")
        for extension in self.extensions:
            extension.include_dirs.append(headers)
        super().build_extensions()


# FLINT_NATIVE_MARCH: the -march the kernels are built for (native: this machine's).
march = os.environ.get("FLINT_NATIVE_MARCH", "native")
kernels = Extension(
    "engine.device.native._cpu_kernels",
    sources=[str(NATIVE / name) for name in ("linear.cc", "dot.cc", "attention.cc", "zeros.cc", "module.cc")],
    depends=[str(NATIVE / name)
             for name in ("simd.h", "blocks.h", "weight_rows.h", "shapes.h", "two_digits.h", "dot_values.h", "softmax.h")],
    language="c++",
    extra_compile_args=["-O3", f"-march={march}", "-ffp-contract=off", "-std=c++17", "-fvisibility=hidden", "-Wno-attributes",
                        "-Wno-return-type"],
    optional=True,
)

setup(ext_modules=[kernels], cmdclass={"build_ext": BuildWithXlaHeaders})
