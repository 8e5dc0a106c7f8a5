"""Opening the memory: URLs, unreachable servers, pragmas, schema versions and migrations."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from coda.errors import CodaError, SchemaVersionError
from coda.memory import MemoryConnectError, MemoryNotFoundError, MemoryStoreError, open_memory
from coda.memory import schema
from coda.memory.config import MemoryConfig
from coda.memory.connect import open_memory_from_config


def test_unreachable_url_fails_fast_with_the_password_hidden(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(MemoryConnectError) as e:
        open_memory(tmp_path, "postgresql+psycopg://u:s3cret@127.0.0.1:1/x", connect_timeout_s=2)
    msg = str(e.value)
    assert time.monotonic() - t0 < 2.0
    assert "\n" not in msg and "s3cret" not in msg
    assert msg.startswith("cannot reach memory database postgresql+psycopg://u:***@127.0.0.1:1/x:")


def test_silent_server_fails_within_the_connect_timeout(tmp_path: Path) -> None:
    """A port that accepts TCP but never answers: the connect timeout, not a hang, ends it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(MemoryConnectError, match=rf"cannot reach memory database .*127.0.0.1:{port}/x"):
            open_memory(tmp_path, f"postgresql://u:pw@127.0.0.1:{port}/x", connect_timeout_s=1)
        elapsed = time.monotonic() - t0
    assert 0.9 < elapsed < 6.0  # libpq waits at least 2 s per attempt


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:pw@host/db", "backend 'mysql' is not supported; use sqlite or postgresql\\+psycopg"),
        ("postgresql+psycopg2://u:pw@host/db", "driver 'psycopg2' is not supported"),
        ("not a url", "memory URL 'not a url' is not a valid URL"),
        ("sqlite://", "names no database file"),
        ("postgresql://u:topsecret@host:notaport/db", "memory URL 'postgresql://u:\\*\\*\\*@host:notaport/db' is not a valid"),
    ],
)
def test_bad_urls_are_named(tmp_path: Path, url: str, message: str) -> None:
    with pytest.raises(MemoryConnectError, match=message) as e:
        open_memory(tmp_path, url)
    assert "pw" not in str(e.value).replace("pw@", "") and "topsecret" not in str(e.value)


def test_sqlite_pragmas_and_missing_database(tmp_path: Path) -> None:
    with pytest.raises(MemoryNotFoundError, match="no memory database at"):
        open_memory(tmp_path / "absent", create=False)
    assert not (tmp_path / "absent").exists()
    with open_memory(tmp_path / "run", busy_timeout_s=3) as mem:
        assert mem.backend == "sqlite" and (tmp_path / "run" / "memory.sqlite").is_file()
        with mem.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 3000
    with open_memory_from_config(tmp_path / "run", MemoryConfig(), readonly=True) as ro:
        with pytest.raises(MemoryStoreError, match="is open read-only"):
            ro.create_run("x", config={}, seed=0, strategy="s")
    with pytest.raises(MemoryConnectError, match="connect_timeout_s = 0"):
        open_memory(tmp_path / "run", connect_timeout_s=0)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_newer_sqlite_schema_is_refused_and_nothing_written(tmp_path: Path) -> None:
    with open_memory(tmp_path) as mem:
        mem.create_run("r", config={}, seed=0, strategy="coda")
    db = tmp_path / "memory.sqlite"
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.execute("PRAGMA journal_mode = DELETE")  # rule out the WAL switch itself as a write
    con.close()
    before = (_sha(db), sorted(p.name for p in tmp_path.iterdir()))
    for kwargs in ({}, {"readonly": True}):
        with pytest.raises(SchemaVersionError, match=r"has schema version 99, newer than this CoDA reads \(1\)"):
            open_memory(tmp_path, **kwargs)
    assert (_sha(db), sorted(p.name for p in tmp_path.iterdir())) == before


@pytest.mark.postgres
def test_newer_postgres_schema_is_refused_and_nothing_written(tmp_path: Path, pg_server) -> None:  # type: ignore[no-untyped-def]
    url = pg_server.new_database()
    with open_memory(tmp_path, url) as mem:
        mem.create_run("r", config={}, seed=0, strategy="coda")
    pg_server.execute(url, "UPDATE schema_meta SET value = '7' WHERE key = 'schema_version'")
    pg_server.execute(url, "DROP TABLE verdicts")  # a newer schema could lack tables: nothing may recreate them
    with pytest.raises(SchemaVersionError, match=r"schema version 7, newer than this CoDA reads \(1\)"):
        open_memory(tmp_path, url)
    tables = {r[0] for r in pg_server.execute(url, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    assert "verdicts" not in tables and "runs" in tables
    in_public = pg_server.execute(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
    assert in_public == [(0,)]  # the URL's search_path option put the memory in the test's own schema
    assert pg_server.execute(url, "SELECT value FROM schema_meta") == [("7",)]


def test_older_schema_is_migrated_step_by_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_memory(tmp_path) as mem:
        mem.create_run("r", config={}, seed=0, strategy="coda")

    def add_notes(conn) -> None:  # type: ignore[no-untyped-def]
        conn.execute(text("ALTER TABLE runs ADD COLUMN notes TEXT"))

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 2)
    with pytest.raises(MemoryStoreError, match="older than this CoDA's \\(2\\); open it once read-write"):
        open_memory(tmp_path, readonly=True)
    with pytest.raises(MemoryStoreError, match="no migration from schema version 1 to 2"):
        open_memory(tmp_path)
    monkeypatch.setattr(schema, "MIGRATIONS", {1: add_notes})
    with open_memory(tmp_path) as mem:
        assert mem.get_run("r").strategy == "coda"
    con = sqlite3.connect(tmp_path / "memory.sqlite")
    assert con.execute("SELECT value FROM schema_meta").fetchall() == [("2",)]
    assert "notes" in [row[1] for row in con.execute("PRAGMA table_info(runs)")]
    con.close()


def test_foreign_database_is_not_taken_over(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "memory.sqlite")
    con.execute("CREATE TABLE runs (x INTEGER)")
    con.close()
    with pytest.raises(CodaError, match=r"has tables \['runs'\] but no schema version"):
        open_memory(tmp_path)


def test_run_directory_names_with_uri_characters(tmp_path: Path) -> None:
    run_dir = tmp_path / "exp #3 ?final" / "run 1"
    with open_memory(run_dir) as mem:
        mem.create_run("r", config={}, seed=0, strategy="coda")
    with open_memory(run_dir, readonly=True) as ro:
        assert [r.id for r in ro.runs()] == ["r"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp #3 ?final"]  # no stray file from a cut-off URI
