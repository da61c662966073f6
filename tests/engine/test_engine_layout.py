"""The shape of engine/: folders by meaning, so that the folders show the architecture.

host/ is plain Python bookkeeping and never loads JAX; text/ never reaches for the device
side or a model; the engine's root keeps only the engine itself and the modules that join
the host to the device."""

from __future__ import annotations

import ast
import subprocess
import sys

from tools.import_graph import ROOT, import_edges, package_modules

# async_encoder: the encoders' counterpart of async_engine (a thread serving many requests);
# residency: the engine's weights and sleep between requests, which both of those drive.
ROOT_MODULES = {"engine", "engine.config", "engine.engine", "engine.async_engine", "engine.async_encoder",
                "engine.rows", "engine.verification", "engine.residency"}
FOLDERS = {"host", "text", "device", "models", "sampling", "loader"}


def loaded_by(modules: list[str]) -> list[str]:
    """Which of jax and numpy a fresh interpreter holds after importing `modules`."""
    code = f"import sys, {', '.join(modules)}; print(sorted(m for m in ('jax', 'numpy') if m in sys.modules))"
    return ast.literal_eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               cwd=ROOT).stdout)


def modules_of(package: str) -> list[str]:
    return sorted(package_modules(package))


def test_the_host_side_and_text_never_load_jax():
    assert "jax" not in loaded_by(modules_of("engine.host") + modules_of("engine.text"))


def test_the_host_bookkeeping_loads_not_even_numpy():
    assert loaded_by(["engine.host.scheduler", "engine.host.block_manager", "engine.host.sequence"]) == []


def test_text_never_imports_the_device_side_or_a_model():
    crossings = [(importer, imported) for importer, imported in import_edges("engine")
                 if importer.startswith("engine.text") and imported.startswith(("engine.device", "engine.models"))]
    assert crossings == []


def test_the_root_holds_the_engine_and_the_folders_by_meaning():
    loose = {name for name, path in package_modules("engine").items() if path.parent == ROOT / "engine"}
    folders = {path.name for path in (ROOT / "engine").iterdir() if (path / "__init__.py").is_file()}
    assert loose == ROOT_MODULES
    assert folders == FOLDERS


def test_the_import_check_sees_text_importing_the_device(tmp_path):
    """A positive control for the edges the checks above read."""
    for name, source in (("__init__.py", ""), ("text/__init__.py", ""), ("device/__init__.py", ""),
                         ("text/tokenizer.py", "from engine.device import runner\n"), ("device/runner.py", "")):
        (tmp_path / "engine" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "engine" / name).write_text(source)
    assert ("engine.text.tokenizer", "engine.device.runner") in import_edges("engine", tmp_path)
