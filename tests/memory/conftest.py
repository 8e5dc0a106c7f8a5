"""Fixtures of the memory tests: a real PostgreSQL server started by the suite, and both backends.

The server is started once per session from the PostgreSQL binaries on PATH or in
/usr/lib/postgresql/*/bin: `initdb` into a temporary directory, listening on a free port on 127.0.0.1 with
its unix socket in that directory, stopped at the end. PostgreSQL refuses to run as root, so as root it runs
as the `postgres` system user (via runuser or su). Each test gets a fresh, empty schema on it.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_USER = "coda"


PG_DB = "coda_test"


@dataclass
class PgServer:
    """A running PostgreSQL server.

    `new_database()` returns the URL of a fresh, empty namespace: a new schema of one test database, selected
    through the URL's `options=-csearch_path=...` (CREATE SCHEMA takes milliseconds, CREATE DATABASE ~0.5 s).
    """

    host: str
    port: int
    _counter: itertools.count = itertools.count()  # type: ignore[assignment]

    def url(self, schema: str, password: str | None = None) -> str:
        auth = PG_USER if password is None else f"{PG_USER}:{password}"
        return f"postgresql+psycopg://{auth}@{self.host}:{self.port}/{PG_DB}?options=-csearch_path%3D{schema}"

    def new_database(self) -> str:
        schema = f"t{os.getpid()}_{next(self._counter)}"
        self.execute(None, f'CREATE SCHEMA "{schema}"')
        return self.url(schema)

    def execute(self, url: str | None, sql: str) -> list[tuple]:
        """Run `sql` directly (no CoDA code) in the schema of `url` (None: the default); returns rows if any."""
        import psycopg

        options = f"-csearch_path={url.rsplit('%3D', 1)[1]}" if url else ""
        with psycopg.connect(host=self.host, port=self.port, user=PG_USER, dbname=PG_DB, options=options,
                             autocommit=True) as c:
            cur = c.execute(sql)
            return cur.fetchall() if cur.description else []


def _pg_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        bindir = Path(found).resolve().parent
        if (bindir / "pg_ctl").exists() and (bindir / "postgres").exists():
            return bindir
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1,
        reverse=True,
    )
    for bindir in candidates:
        if all((bindir / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_user_prefix() -> tuple[list[str], tuple[int, int] | None]:
    """Command prefix to run the server unprivileged, and the uid/gid to own its files (None: ourselves)."""
    if os.geteuid() != 0:
        return [], None
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run the PostgreSQL server as")
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--"], (pw.pw_uid, pw.pw_gid)
    if shutil.which("su"):
        return ["su", "postgres", "-s", "/bin/sh", "-c", '"$0" "$@"'], (pw.pw_uid, pw.pw_gid)
    pytest.skip("running as root and neither runuser nor su exists to run PostgreSQL unprivileged")


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the whole session (skips, with the reason, only if it cannot start)."""
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not found (no initdb/pg_ctl/postgres on PATH or in /usr/lib/postgresql/*/bin)")
    prefix, owner = _as_user_prefix()
    tmp = Path(tempfile.mkdtemp(prefix="coda-pg-"))  # under /tmp: reachable by the unprivileged user
    if owner is not None:
        os.chown(tmp, *owner)
    data, log = tmp / "data", tmp / "server.log"
    port = _free_port()
    started = False
    try:
        init = _run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", PG_USER, "-A", "trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            tmp,
        )
        if init.returncode != 0:
            pytest.skip(f"PostgreSQL initdb failed: {(init.stderr or init.stdout).strip().splitlines()[-1:]}")
        opts = (
            f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "
            "-c synchronous_commit=off -c max_connections=50"
        )
        start = _run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                      "-o", opts, "start"], tmp)
        if start.returncode != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            pytest.skip(f"PostgreSQL server could not be started: {start.stderr.strip() or start.stdout.strip()} {tail}")
        started = True
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=port, user=PG_USER, dbname="postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{PG_DB}"')
        yield PgServer(host="127.0.0.1", port=port)
    finally:
        if started:
            _run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], tmp)
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Backend:
    """Where a test's memory lives: `url` None = SQLite file in `run_dir`."""

    name: str
    run_dir: Path
    url: str | None
    server: PgServer | None = None

    def open(self, **kwargs):  # type: ignore[no-untyped-def]
        from coda.memory import open_memory

        return open_memory(self.run_dir, self.url, **kwargs)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each test using it runs twice: SQLite file in the run directory, and a fresh PostgreSQL database."""
    run_dir = tmp_path / "run"
    if request.param == "sqlite":
        return Backend("sqlite", run_dir, None)
    server: PgServer = request.getfixturevalue("pg_server")
    return Backend("postgresql", run_dir, server.new_database(), server)
