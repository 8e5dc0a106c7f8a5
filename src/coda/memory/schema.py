"""Schema versions of the memory database: a `schema_meta` table plus numbered migration steps.

A fresh database is created at `SCHEMA_VERSION` in one transaction. An older one is migrated step by step
(`MIGRATIONS[v]` takes version v to v + 1), all steps and the new version number in one transaction. A newer
one is refused with SchemaVersionError before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Column, Connection, MetaData, String, Table, inspect, select, text

from coda.errors import SchemaVersionError
from coda.memory.errors import MemoryStoreError
from coda.memory.models import Base

SCHEMA_VERSION = 1

# Step v -> v + 1, run inside the upgrade transaction. Append a step (and bump SCHEMA_VERSION) to change tables.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}

_meta = MetaData()
schema_meta = Table(
    "schema_meta",
    _meta,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)


def read_version(conn: Connection) -> int | None:
    """The schema version stored in the database, or None if it has no `schema_meta` table.

    Raises:
        MemoryStoreError: the table exists but holds no usable version.
    """
    if not inspect(conn).has_table("schema_meta"):
        return None
    raw = conn.execute(select(schema_meta.c.value).where(schema_meta.c.key == "schema_version")).scalar()
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        raise MemoryStoreError(f"schema_meta 'schema_version' = {raw!r} is not an integer") from None


def check_readable(version: int | None, where: str) -> None:
    """Raise SchemaVersionError if `version` is newer than this CoDA reads.

    Args:
        version: the stored version (None = empty database).
        where: the database, for the message (password hidden).
    """
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"memory database {where} has schema version {version}, newer than this CoDA reads "
            f"({SCHEMA_VERSION}); upgrade coda to open it"
        )


def ensure_schema(conn: Connection, where: str) -> int:
    """Create or upgrade the schema on `conn` (inside the caller's transaction). Returns the version found.

    Raises:
        SchemaVersionError: the database is newer than this CoDA.
        MemoryStoreError: the database holds CoDA tables but no schema version.
    """
    found = read_version(conn)
    check_readable(found, where)
    if found is None:
        existing = set(inspect(conn).get_table_names()) & set(Base.metadata.tables)
        if existing:
            raise MemoryStoreError(
                f"memory database {where} has tables {sorted(existing)} but no schema version; "
                "it was not written by CoDA or is damaged"
            )
        Base.metadata.create_all(conn)
        _meta.create_all(conn)
        conn.execute(schema_meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
        return SCHEMA_VERSION
    for v in range(found, SCHEMA_VERSION):
        if v not in MIGRATIONS:
            raise MemoryStoreError(f"memory database {where}: no migration from schema version {v} to {v + 1}")
        MIGRATIONS[v](conn)
    if found < SCHEMA_VERSION:
        conn.execute(
            schema_meta.update().where(schema_meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION))
        )
    return found


def lock_for_schema(conn: Connection) -> None:
    """Serialise schema creation between processes opening the same PostgreSQL database at once."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7316520451)"))  # arbitrary constant: CoDA's schema lock
