"""The `flint` command's entry (api/server/launch.py): the server's modules import with the
collector off, and are frozen out of its way before it comes back on."""

from __future__ import annotations

import gc
import sys
import tomllib
from pathlib import Path

import pytest

from api.server import launch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def thawed():
    yield
    gc.unfreeze()  # the rest of this worker's tests run as before
    gc.enable()


def test_imports_run_with_the_collector_off_and_are_frozen_after(thawed):
    frozen = gc.get_freeze_count()
    with launch.imports_frozen():
        assert not gc.isenabled()
        made = [[index] for index in range(1000)]  # objects the collector tracks
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)


def test_a_collector_that_was_off_stays_off(thawed):
    gc.disable()
    with launch.imports_frozen():
        pass
    assert not gc.isenabled()


def test_the_command_enters_through_it(thawed, monkeypatch, capsys):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["flint"] == "api.server.launch:main"
    monkeypatch.setattr(sys, "argv", ["flint", "serve", "--help"])
    with pytest.raises(SystemExit) as exited:
        launch.main()
    assert exited.value.code == 0 and "--max-num-seqs" in capsys.readouterr().out
