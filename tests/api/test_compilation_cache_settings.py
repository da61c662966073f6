"""Where `flint serve` and `flint generate` keep compiled programs: the flags and their defaults."""

from __future__ import annotations

import os

import pytest

from api.server.cli import build_parser
from api.server.serve import compilation_cache_from_args, settings_from_args
from api.server.settings import Settings


@pytest.fixture
def no_jax_cache_env(monkeypatch):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)


def served(*flags: str) -> str | None:
    return settings_from_args(build_parser().parse_args(["serve", *flags])).compilation_cache


def test_the_cache_lives_in_the_data_directory_by_default(no_jax_cache_env, tmp_path):
    assert served("--data-dir", str(tmp_path)) == os.path.join(tmp_path, "compilation-cache")
    assert Settings(data_dir=str(tmp_path)).compilation_cache == os.path.join(tmp_path, "compilation-cache")


def test_jax_own_setting_and_then_the_flag_take_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    assert served("--data-dir", str(tmp_path)) == str(tmp_path / "jax")
    assert served("--compilation-cache", str(tmp_path / "flag")) == str(tmp_path / "flag")


@pytest.mark.parametrize("flags", [["--no-compilation-cache"], ["--compilation-cache", ""]])
def test_the_cache_can_be_turned_off(no_jax_cache_env, flags):
    assert served(*flags) is None


def test_generate_takes_the_same_flags(no_jax_cache_env, monkeypatch, tmp_path):
    monkeypatch.setenv("FLINT_DATA_DIR", str(tmp_path))
    def parse(*flags: str) -> str | None:
        return compilation_cache_from_args(build_parser().parse_args(["generate", "hi", *flags]))

    assert parse() == os.path.join(tmp_path, "compilation-cache")
    assert parse("--compilation-cache", "/elsewhere") == "/elsewhere"
    assert parse("--no-compilation-cache") is None
