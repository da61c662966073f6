"""tests/postgres_server.py: when a missing PostgreSQL skips and when it fails the run, and a
throwaway server that finds its port taken moving to another (as two xdist workers might)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import postgres_server
from postgres_server import REQUIRED_VARIABLE, URL_VARIABLE, ThrowawayPostgres, postgres_required


@pytest.mark.parametrize(("value", "required"), [(None, False), ("", False), ("0", False), ("1", True),
                                                 ("true", True)])
def test_postgres_is_required_when_the_variable_is_set(value, required):
    environ = {} if value is None else {REQUIRED_VARIABLE: value}
    assert postgres_required(environ) is required


def outcome_without_postgres(monkeypatch, required: bool) -> BaseException:
    """What asking for the first database raised: a skip or a failure (caught as either, so a
    skip where a failure is due fails this test instead of skipping it)."""
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    if required:
        monkeypatch.setenv(REQUIRED_VARIABLE, "1")
    else:
        monkeypatch.delenv(REQUIRED_VARIABLE, raising=False)
    with pytest.raises((pytest.skip.Exception, pytest.fail.Exception)) as raised:
        next(postgres_server.postgres_database())
    return raised.value


def assert_skips_unless_required(monkeypatch, reason: str) -> None:
    skipped = outcome_without_postgres(monkeypatch, required=False)
    assert isinstance(skipped, pytest.skip.Exception) and reason in str(skipped)
    failed = outcome_without_postgres(monkeypatch, required=True)
    assert isinstance(failed, pytest.fail.Exception), failed
    assert REQUIRED_VARIABLE in str(failed) and reason in str(failed)


def test_without_binaries_the_postgres_tests_skip_unless_required(monkeypatch):
    monkeypatch.setattr(postgres_server, "postgres_bin_dir", lambda: None)
    assert_skips_unless_required(monkeypatch, "no /usr/lib/postgresql/*/bin/initdb is installed")


def broken_bin_dir(directory: Path) -> Path:
    """Binaries whose initdb always fails (or, run as `postgres` under root, cannot even be
    executed from tmp_path): a server that cannot start."""
    directory.mkdir()
    for name in ("initdb", "pg_ctl"):
        (directory / name).write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
        (directory / name).chmod(0o755)
    return directory


def test_a_server_that_does_not_start_skips_unless_required(monkeypatch, tmp_path):
    bin_dir = broken_bin_dir(tmp_path / "bin")
    monkeypatch.setattr(postgres_server, "postgres_bin_dir", lambda: bin_dir)
    assert_skips_unless_required(monkeypatch, "a throwaway server did not start")


def test_a_throwaway_server_whose_port_was_taken_starts_on_another(monkeypatch):
    bin_dir = postgres_server.postgres_bin_dir()
    if bin_dir is None:
        postgres_server.no_postgres("no /usr/lib/postgresql/*/bin/initdb is installed")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        ports = iter([taken_port])
        real_free_port = postgres_server.free_port
        monkeypatch.setattr(postgres_server, "free_port", lambda: next(ports, None) or real_free_port())
        server = ThrowawayPostgres(bin_dir)
        try:
            server.start()
            assert server.started and server.port != taken_port
        finally:
            server.stop()
    assert not server.root.exists()
