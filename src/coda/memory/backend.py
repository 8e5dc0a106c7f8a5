"""Database engines for the memory: SQLite file (WAL) by default, PostgreSQL by URL, one code path.

SQLite notes. Python's sqlite3 module only opens a transaction before data-changing statements, so two
SELECTs could see two different commits. Here the driver's own transaction handling is switched off and
every transaction starts explicitly: `BEGIN IMMEDIATE` for writes (the write lock is taken up front, so two
writers queue instead of deadlocking) and a plain `BEGIN` for reads (one consistent WAL snapshot).
PostgreSQL reads run in REPEATABLE READ for the same reason.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

from coda.memory.errors import MemoryConnectError

DB_FILENAME = "memory.sqlite"
SQLITE_BEGIN_OPTION = "coda_sqlite_begin"  # execution option: the BEGIN statement a SQLite transaction uses
READ_OPTIONS_SQLITE = {SQLITE_BEGIN_OPTION: "BEGIN"}
READ_OPTIONS_POSTGRES = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}

_PASSWORD_RE = re.compile(r"(://[^:/@]*:)[^@]*@")


def mask_url(url: str | URL) -> str:
    """The URL with its password replaced by `***` (also for strings SQLAlchemy cannot parse)."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _PASSWORD_RE.sub(r"\1***@", url)


def normalize_url(url: str) -> URL:
    """Parse a memory URL; `postgresql://` and `postgres://` mean the psycopg 3 driver.

    Raises:
        MemoryConnectError: the URL is malformed or names a backend other than SQLite or PostgreSQL.
    """
    raw = url.strip()
    if raw.startswith("postgres://"):
        raw = "postgresql://" + raw[len("postgres://") :]
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError):
        raise MemoryConnectError(
            f"memory URL '{mask_url(url)}' is not a valid URL; expected sqlite:///PATH or "
            "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgresql":
        if driver not in ("", "psycopg"):
            raise MemoryConnectError(
                f"memory URL '{mask_url(parsed)}': driver '{driver}' is not supported; use postgresql+psycopg://"
            )
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise MemoryConnectError(f"memory URL '{mask_url(parsed)}': driver '{driver}' is not supported")
        if not parsed.database or parsed.database == ":memory:":
            raise MemoryConnectError(
                f"memory URL '{mask_url(parsed)}' names no database file; an in-memory database "
                "cannot be shared between processes"
            )
        return parsed
    raise MemoryConnectError(
        f"memory URL '{mask_url(parsed)}': backend '{backend}' is not supported; use sqlite or postgresql+psycopg"
    )


def sqlite_uri(path: Path, mode: str = "ro") -> str:
    """A SQLite `file:` URI for `path` (percent-encoded, so spaces, '#' and '?' in directory names are safe)."""
    return f"file:{quote(path.resolve().as_posix())}?mode={mode}"


def sqlite_url(path: Path, readonly: bool = False) -> URL:
    """The SQLAlchemy URL of a SQLite file; `readonly` opens it with the `mode=ro` URI."""
    path = path.resolve()
    if readonly:
        # Built, not parsed: the URI's own '?mode=ro' must reach sqlite3 intact.
        return URL.create("sqlite", database=sqlite_uri(path), query={"uri": "true"})
    return URL.create("sqlite", database=path.as_posix())


def sqlite_path(url: URL) -> Path:
    """The file a SQLite URL points at (URI form `file:...?mode=ro` included)."""
    db = url.database or ""
    if db.startswith("file:"):
        return Path(unquote(db[len("file:") :].split("?", 1)[0]))
    return Path(db)


def build_engine(url: URL, *, connect_timeout_s: float, busy_timeout_s: float, readonly: bool) -> Engine:
    """Create the engine for `url` with the pragmas / connection options the memory relies on.

    Args:
        url: a normalised memory URL (see `normalize_url` / `sqlite_url`).
        connect_timeout_s: PostgreSQL: give up connecting after this long (libpq rounds up to >= 2 s).
        busy_timeout_s: SQLite: wait this long for another writer's lock before failing.
        readonly: refuse writes at the connection level (SQLite `query_only`, PostgreSQL read-only sessions).

    Returns:
        An Engine. Nothing is connected yet.
    """
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url, busy_timeout_s=busy_timeout_s, readonly=readonly)
    connect_args: dict[str, Any] = {"connect_timeout": max(1, math.ceil(connect_timeout_s))}
    if readonly:
        # Read-only at session level too, so that even a COMMIT inside a query cannot open a writable transaction.
        # Appended to the URL's own `options` (e.g. `-csearch_path=coda`), which connect_args would otherwise replace.
        own = url.query.get("options")
        own_text = " ".join(own) if isinstance(own, tuple) else (own or "")
        connect_args["options"] = f"{own_text} -c default_transaction_read_only=on".strip()
    return _guard_fork(create_engine(url, connect_args=connect_args, pool_pre_ping=True, pool_size=2, max_overflow=4))


def _guard_fork(engine: Engine) -> Engine:
    """Never hand a pooled connection opened in a parent process to a forked child (they would share a socket
    or a SQLite file handle); the child opens its own instead."""

    @event.listens_for(engine, "connect")
    def _remember_pid(_dbapi_conn: Any, record: Any) -> None:
        record.info["pid"] = os.getpid()

    @event.listens_for(engine, "checkout")
    def _check_pid(_dbapi_conn: Any, record: Any, proxy: Any) -> None:
        if record.info.get("pid") != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None
            raise DisconnectionError(f"connection opened in process {record.info.get('pid')}, now in {os.getpid()}")

    return engine


def _sqlite_engine(url: URL, *, busy_timeout_s: float, readonly: bool) -> Engine:
    engine = create_engine(url, pool_size=2, max_overflow=8)
    busy_ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see module docstring)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cur.execute("PRAGMA foreign_keys = ON")
        if readonly:
            cur.execute("PRAGMA query_only = ON")
        else:
            cur.execute("PRAGMA journal_mode = WAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        default = "BEGIN" if readonly else "BEGIN IMMEDIATE"
        conn.exec_driver_sql(conn.get_execution_options().get(SQLITE_BEGIN_OPTION, default))

    return _guard_fork(engine)
