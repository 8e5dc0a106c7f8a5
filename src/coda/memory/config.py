"""Memory-store configuration (cheap)."""

from __future__ import annotations

from pydantic import Field

from coda.config_base import Section


class MemoryConfig(Section):
    url: str | None = None  # SQLAlchemy URL; None = SQLite file `memory.sqlite` in the run directory
    connect_timeout_s: float = Field(5.0, gt=0)  # give up connecting to a server after this long
    busy_timeout_s: float = Field(10.0, gt=0)  # SQLite: wait this long for another process's write lock
