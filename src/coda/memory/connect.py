"""`open_memory`: connect to a run's memory database, check its schema version, create or upgrade it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from coda.errors import CodaError
from coda.memory import schema
from coda.memory.backend import (
    DB_FILENAME,
    READ_OPTIONS_POSTGRES,
    READ_OPTIONS_SQLITE,
    build_engine,
    mask_url,
    normalize_url,
    sqlite_path,
    sqlite_uri,
    sqlite_url,
)
from coda.memory.errors import MemoryConnectError, MemoryNotFoundError, MemoryStoreError
from coda.memory.store import Memory, first_line

if TYPE_CHECKING:
    from coda.memory.config import MemoryConfig


def open_memory(
    run_dir: str | Path,
    url: str | None = None,
    connect_timeout_s: float = 5.0,
    *,
    busy_timeout_s: float = 10.0,
    create: bool = True,
    readonly: bool = False,
) -> Memory:
    """Open the memory of a run directory.

    Args:
        run_dir: the run directory; holds `memory.sqlite` (when `url` is None) and the artifacts.
        url: a SQLAlchemy URL instead of the run's SQLite file: `postgresql+psycopg://USER:PW@HOST:PORT/DB`
            (`postgresql://` is read the same way) or `sqlite:///PATH`.
        connect_timeout_s: give up on an unreachable server after this long.
        busy_timeout_s: SQLite: wait this long for another process's write lock.
        create: create the database (and run directory) when missing; if False a missing SQLite file is an error.
        readonly: refuse all writes (SQLite opened with `mode=ro`, PostgreSQL sessions read-only); the schema is
            neither created nor upgraded.

    Returns:
        A Memory. Close it (or use it as a context manager) when done.

    Raises:
        MemoryConnectError: bad or unsupported URL, or the database cannot be reached (password hidden).
        MemoryNotFoundError: no SQLite file and `create` is False (or `readonly`).
        SchemaVersionError: the database was written by a newer schema; nothing was written to it.
        MemoryStoreError: the database is not a CoDA memory, or is older and opened read-only.
    """
    for name, value in (("connect_timeout_s", connect_timeout_s), ("busy_timeout_s", busy_timeout_s)):
        if not value > 0:
            raise MemoryConnectError(f"{name} = {value!r}: must be > 0")
    run_dir = Path(run_dir)
    if url is None:
        parsed: URL = sqlite_url(run_dir / DB_FILENAME)
    else:
        parsed = normalize_url(url)
    where = mask_url(parsed)
    if parsed.get_backend_name() == "sqlite":
        db_file = sqlite_path(parsed)
        if db_file.is_dir():
            raise MemoryConnectError(f"memory database '{db_file}' is a directory, not a SQLite file")
        if db_file.exists():
            # Checked through a read-only handle first, so a newer database is refused with nothing written.
            schema.check_readable(_sqlite_version_readonly(db_file, where), where)
        elif readonly or not create:
            raise MemoryNotFoundError(f"no memory database at '{db_file}' (run directory '{run_dir}')")
        else:
            db_file.parent.mkdir(parents=True, exist_ok=True)
        if readonly:
            parsed = sqlite_url(db_file, readonly=True)
        read_options = dict(READ_OPTIONS_SQLITE)
    else:
        read_options = dict(READ_OPTIONS_POSTGRES)
    engine = build_engine(parsed, connect_timeout_s=connect_timeout_s, busy_timeout_s=busy_timeout_s, readonly=readonly)
    try:
        _prepare_schema(engine, read_options, where, readonly)
    except BaseException:
        engine.dispose()
        raise
    return Memory(engine, where, run_dir, readonly, read_options)


def open_memory_from_config(run_dir: str | Path, cfg: "MemoryConfig", *, readonly: bool = False,
                            create: bool = True) -> Memory:
    """`open_memory` with the URL and timeouts of a MemoryConfig section."""
    return open_memory(
        run_dir, cfg.url, cfg.connect_timeout_s, busy_timeout_s=cfg.busy_timeout_s, readonly=readonly, create=create
    )


def _sqlite_version_readonly(db_file: Path, where: str) -> int | None:
    try:
        con = sqlite3.connect(sqlite_uri(db_file), uri=True, timeout=10)
    except sqlite3.Error as e:
        raise MemoryConnectError(f"cannot open memory database {where}: {e}") from None
    try:
        row = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='schema_meta'").fetchone()
        if row is None:
            return None
        got = con.execute("SELECT value FROM schema_meta WHERE key='schema_version'").fetchone()
        return int(got[0]) if got is not None else None
    except sqlite3.DatabaseError as e:
        raise MemoryConnectError(f"memory database {where} is not a readable SQLite file: {e}") from None
    except ValueError:
        raise MemoryStoreError(f"memory database {where}: schema_meta 'schema_version' is not an integer") from None
    finally:
        con.close()


LOCKED_RETRIES = 30  # SQLite: attempts to open a memory that other processes are creating at the same moment


def _prepare_schema(engine: Engine, read_options: dict[str, Any], where: str, readonly: bool) -> None:
    """Check (and create or upgrade) the schema. On SQLite some lock transitions of a brand-new file
    (switching it to WAL, recovering its index) answer "database is locked" at once instead of waiting for
    the busy timeout when several processes open it together; those attempts are retried with a growing
    pause (about 15 s in all) before the error is raised."""
    for attempt in range(LOCKED_RETRIES):
        try:
            return _prepare_schema_once(engine, read_options, where, readonly)
        except MemoryConnectError as e:
            if "database is locked" not in str(e) or attempt == LOCKED_RETRIES - 1:
                raise
            engine.dispose()  # drop connections that may have failed half-way through their set-up
            time.sleep(min(0.05 * (attempt + 1), 0.6))


def _prepare_schema_once(engine: Engine, read_options: dict[str, Any], where: str, readonly: bool) -> None:
    try:
        # Look first, in a read transaction: a newer database is refused, an up-to-date one opened, with no
        # write and no write lock (on SQLite a write lock would queue behind a busy writer).
        with engine.execution_options(**read_options).connect() as conn:
            found = schema.read_version(conn)
            conn.rollback()
        schema.check_readable(found, where)
        if readonly:
            if found is None:
                raise MemoryStoreError(f"memory database {where} holds no CoDA memory (no schema version)")
            if found < schema.SCHEMA_VERSION:
                raise MemoryStoreError(
                    f"memory database {where} has schema version {found}, older than this CoDA's "
                    f"({schema.SCHEMA_VERSION}); open it once read-write to upgrade it"
                )
            return
        if found == schema.SCHEMA_VERSION:
            return
        with engine.begin() as conn:  # create or upgrade; ensure_schema looks again under the lock
            schema.lock_for_schema(conn)
            schema.ensure_schema(conn, where)
    except CodaError:
        raise
    except SQLAlchemyError as e:
        raise MemoryConnectError(f"cannot reach memory database {where}: {first_line(e)}") from None
