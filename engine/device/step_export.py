"""Lowered steps kept between starts (jax.export), so that a warm start does not trace the model.

The persistent compilation cache (engine/device/compile_cache.py) keeps XLA's compiled
programs, but JAX looks a program up by its lowered module: every start would still trace
the model and the sampler in Python and lower them, about a second a bucket on a 2-core
CPU, most of a warm start. So the step of each bucket is exported once (StableHLO,
serialized by jax.export) into `steps/` beside the compilation cache, and a later start
deserializes it and compiles a thin wrapper around it, which the compilation cache then
serves. A fresh export is compiled through the same wrapper, so the first start leaves in
the cache exactly the program the next one asks for. Only where `keep_lowered_steps` was
called: `flint serve`, `generate` and `chat --local` call it with their compilation cache.

An export is found by a key of everything the traced program depends on: the engine's
source and native library, the model's and the engine's configuration, the arrays' shapes,
dtypes and shardings, the platform and the jax version. Anything that cannot be exported
(or read back) is traced and lowered as before: this only ever saves time.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jax
from jax import export

import engine

log = logging.getLogger("flint")

STEPS_DIR = "steps"  # under the compilation cache's directory
KEEP = 256  # exported steps kept, the most recently used: each is 100-200 KB
SUFFIX = ".step"

_kept_in: Path | None = None  # set by `keep_lowered_steps`


def keep_lowered_steps(directory: str | os.PathLike | None) -> None:
    """Keep the lowered steps this process compiles from now on in `directory`, and read
    those there (None: neither). A server sets it with its compilation cache
    (api/server/lifecycle.py); a library user, or a test that patches what a step traces,
    leaves it unset: a kept step is not traced again."""
    global _kept_in
    _kept_in = None if directory is None else Path(directory).expanduser()


def lowered_steps_dir() -> Path | None:
    return _kept_in


class ExportedStep:
    """A compiled exported step, called as the jitted step is: with its pytree arguments,
    returning its pytree result."""

    def __init__(self, compiled: Callable, out_tree) -> None:
        self._compiled = compiled
        self._out_tree = out_tree

    def __call__(self, *args):
        return jax.tree_util.tree_unflatten(self._out_tree, self._compiled(*jax.tree_util.tree_leaves(args)))


@dataclass(frozen=True)
class KeptLowering:
    """A step lowered through its export; `found`: read back rather than exported now."""

    lowered: jax.stages.Lowered
    out_tree: object
    found: bool

    def compile(self) -> ExportedStep:
        return ExportedStep(self.lowered.compile(), self.out_tree)


class StepStore:
    """Exported steps in `directory`, by key."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def lower(self, step: Callable, args: Sequence, key_parts: Sequence, donate: int,
              compiler_options: dict | None, custom_calls: Sequence[str]) -> KeptLowering:
        """`step(*args)` lowered from its kept export, or exported now and kept; `args` are
        abstract (jax.ShapeDtypeStruct trees) and `donate` is the index of the one donated.
        Raises what exporting raises (the caller lowers the step itself then)."""
        leaves, in_tree = jax.tree_util.tree_flatten(tuple(args))
        path = self.directory / (step_key(in_tree, leaves, key_parts) + SUFFIX)
        found = self._read(path)
        exported, out_tree = found or self._export(step, in_tree, leaves, custom_calls)
        if found is None:
            self._write(path, exported, out_tree)
        wrapper = jax.jit(_called(exported), donate_argnums=donated_leaves(args, donate),
                          compiler_options=compiler_options)
        return KeptLowering(wrapper.lower(*leaves), out_tree, found is not None)

    @staticmethod
    def _export(step: Callable, in_tree, leaves: list, custom_calls: Sequence[str]):
        """The step exported over flat arguments and results: Exported serializes a tree of
        plain tuples and lists only, and the result's own tree is kept beside it."""
        out_trees = []

        def flat(*flat_args):
            result = step(*jax.tree_util.tree_unflatten(in_tree, flat_args))
            result_leaves, out_tree = jax.tree_util.tree_flatten(result)
            out_trees.append(out_tree)
            return result_leaves

        # Flint's own kernels are custom calls that jax.export cannot vouch for across jax
        # versions; the key holds the jax version and the library's bytes, so that is safe here.
        checks = [export.DisabledSafetyCheck.custom_call(name) for name in custom_calls]
        exported = export.export(jax.jit(flat), disabled_checks=checks)(*leaves)
        return exported, out_trees[-1]

    def _read(self, path: Path):
        """(Exported, result tree) kept at `path`, or None (absent or unreadable: removed)."""
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            module, out_tree = pickle.loads(data)
            found = export.deserialize(bytearray(module)), out_tree
        except Exception as error:  # a file from an older Flint, or cut short: export again
            log.warning("the kept step %s cannot be read (%s): exporting it again", path.name, error)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # recently used: kept by `_prune`
        return found

    def _write(self, path: Path, exported, out_tree) -> None:
        """Kept atomically (another server may share the directory), then the oldest pruned.
        A directory that cannot be written is worth a warning: the next start traces again."""
        try:
            data = pickle.dumps((bytes(exported.serialize()), out_tree))
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.directory, suffix=".tmp", delete=False) as file:
                file.write(data)
            os.replace(file.name, path)
            self._prune()
        except (OSError, pickle.PicklingError) as error:
            log.warning("the exported step cannot be kept in %s (%s)", self.directory, error)

    def _prune(self) -> None:
        kept = sorted(self.directory.glob("*" + SUFFIX), key=lambda path: path.stat().st_mtime, reverse=True)
        for path in kept[KEEP:]:
            path.unlink(missing_ok=True)


def _called(exported) -> Callable:
    """`exported.call` as a function named `step`: the compilation cache names its entries
    after the jitted function (`jit_step-...`), and profiles name the program so."""
    def step(*flat_args):
        return exported.call(*flat_args)
    return step


def donated_leaves(args: Sequence, donate: int) -> tuple[int, ...]:
    """The flat indices of the leaves of `args[donate]`."""
    start = sum(len(jax.tree_util.tree_leaves(arg)) for arg in args[:donate])
    return tuple(range(start, start + len(jax.tree_util.tree_leaves(args[donate]))))


def step_key(in_tree, leaves: list, key_parts: Sequence) -> str:
    """A hash of everything the traced step depends on (see the module's docstring)."""
    digest = hashlib.sha256()
    for part in (source_fingerprint(), *library_versions(), jax.default_backend(), jax.devices()[0].device_kind,
                 jax.device_count(), jax.process_count(), jax.config.jax_enable_x64,
                 jax.config.jax_default_matmul_precision, str(in_tree), *key_parts):
        digest.update(repr(part).encode() + b"\0")
    for leaf in leaves:
        digest.update(f"{leaf.shape}{leaf.dtype}{leaf.sharding}".encode())
    return digest.hexdigest()[:32]


def library_versions() -> tuple[str, ...]:
    """The libraries that trace the step: JAX and XLA, NumPy."""
    import jaxlib
    import numpy

    return jax.__version__, jaxlib.__version__, numpy.__version__


@functools.cache
def source_fingerprint() -> str:
    """A hash of the engine's Python source and its native library: a changed file makes
    every kept step stale."""
    digest = hashlib.sha256()
    root = Path(engine.__file__).parent
    files = sorted(path for pattern in ("*.py", "*.so") for path in root.rglob(pattern))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
