"""A PostgreSQL server for the store tests, and the store URLs the fixtures of
tests/conftest.py give: a fresh store per test, on SQLite and on PostgreSQL.

PostgreSQL comes from $FLINT_TEST_POSTGRES_URL (postgresql+asyncpg://user:password@host:port/db;
the user needs CREATEDB: the tests make and drop their own database), else from a throwaway
server started here with Debian's binaries (/usr/lib/postgresql/*/bin: initdb, pg_ctl) in a
temporary directory on a free port, run as the `postgres` user when the tests run as root
(PostgreSQL refuses to run as root). Each pytest process (an xdist worker included) starts its
own, in its own directory, and tries another port when the one it picked was taken meanwhile.
When neither is possible the PostgreSQL tests skip, saying why, unless
$FLINT_TEST_POSTGRES_REQUIRED is set: `.ci/run` installs the binaries and sets it, so in CI a
server that does not start fails the run instead of skipping it."""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NoReturn

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from api.core.store_schema import tables
from e2e.flint_process import free_port

URL_VARIABLE = "FLINT_TEST_POSTGRES_URL"
REQUIRED_VARIABLE = "FLINT_TEST_POSTGRES_REQUIRED"
BACKENDS = ("sqlite", "postgresql")
# Tries at starting the throwaway server, each on a fresh port: between free_port() closing its
# socket and the server binding the port, another process (another xdist worker's server) may
# have taken it.
START_ATTEMPTS = 3


def postgres_required(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a missing PostgreSQL is a failure rather than a skip ($FLINT_TEST_POSTGRES_REQUIRED
    set and not 0: CI, which installed the binaries, so not starting is a defect there)."""
    return environ.get(REQUIRED_VARIABLE, "").strip() not in ("", "0")


def no_postgres(reason: str, environ: Mapping[str, str] = os.environ) -> NoReturn:
    """Skip the test, saying why; or fail it where PostgreSQL is required."""
    if postgres_required(environ):
        pytest.fail(f"PostgreSQL is required (${REQUIRED_VARIABLE} is set) and there is none: {reason}",
                    pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


def postgres_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's binaries (Debian keeps them per major version)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def server_user() -> str | None:
    """Who runs the server: the tests' own user, or `postgres` (else `nobody`) under root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) exists to run PostgreSQL")


class ThrowawayPostgres:
    """initdb + pg_ctl in a temporary directory; `url` once started."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.user = server_user()
        self.root = Path(tempfile.mkdtemp(prefix="flint-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://flint@127.0.0.1:{self.port}/postgres"

    def run(self, *args: str) -> None:
        result = subprocess.run([str(self.bin_dir / args[0]), *args[1:]], user=self.user, capture_output=True,
                                text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        if self.user is not None:
            shutil.chown(self.root, user=self.user)
        # fsync off and no sync after initdb: a throwaway server, fast to start.
        self.run("initdb", "-D", str(self.data), "-U", "flint", "-A", "trust", "--no-sync")
        for attempt in range(START_ATTEMPTS):
            try:
                self.start_on(free_port())
                return
            except RuntimeError:
                if attempt == START_ATTEMPTS - 1:
                    raise

    def start_on(self, port: int) -> None:
        # The socket lives in our own directory, not /tmp or /var/run/postgresql, so servers of
        # several processes never share a socket or its lock file.
        self.port = port
        options = f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        self.started = True

    def stop(self) -> None:
        try:
            if self.started:
                self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


async def execute_autocommit(url: str, statement: str) -> None:
    """CREATE / DROP DATABASE, which PostgreSQL runs outside transactions only."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def drop_tables(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(tables.drop_all)
    finally:
        await engine.dispose()


def postgres_database() -> Iterator[str]:
    """The URL of a database of its own on a PostgreSQL server, dropped at the end (the
    `postgres_url` fixture of tests/conftest.py)."""
    server = None
    base_url = os.environ.get(URL_VARIABLE)
    if not base_url:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            no_postgres(f"${URL_VARIABLE} is unset and no /usr/lib/postgresql/*/bin/initdb is installed "
                        "(apt-get install postgresql)")
        server = ThrowawayPostgres(bin_dir)
        try:
            server.start()
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            server.stop()
            no_postgres(f"${URL_VARIABLE} is unset and a throwaway server did not start: {error}")
        base_url = server.url
    database = f"flint_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(execute_autocommit(base_url, f'CREATE DATABASE "{database}"'))
    try:
        yield make_url(base_url).set(database=database).render_as_string(hide_password=False)
    finally:
        asyncio.run(execute_autocommit(base_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        if server is not None:
            server.stop()


def empty_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's URL for `request.param` (the `store_url` fixture of tests/conftest.py):
    a SQLite file in tmp_path, or the PostgreSQL test database with its tables dropped."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'flint.db'}"
    url = request.getfixturevalue("postgres_url")
    asyncio.run(drop_tables(url))
    return url
