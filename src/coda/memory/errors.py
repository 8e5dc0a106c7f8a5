"""Errors of the shared memory. Each is one line naming the field, the value or the database (password hidden)."""

from __future__ import annotations

from coda.errors import CodaError


class MemoryStoreError(CodaError):
    """Base class of memory errors (named so as not to shadow Python's built-in MemoryError)."""


class MemoryConnectError(MemoryStoreError):
    """The memory URL is malformed, names an unsupported backend, or the database cannot be reached."""


class MemoryNotFoundError(MemoryStoreError, FileNotFoundError):
    """A run directory has no memory database and the caller asked not to create one."""


class RecordNotFoundError(MemoryStoreError, LookupError):
    """No record of that kind with that id (or no such run)."""


class DuplicateRecordError(MemoryStoreError):
    """A record with the same natural key already exists (a replayed write)."""


class InvalidRecordError(MemoryStoreError, ValueError):
    """A record field holds a missing, mistyped, non-finite or non-JSON value, or a dangling reference."""


class PhaseCommittedError(MemoryStoreError):
    """The phase was already committed for that run and round; the engine must skip it."""


class ReadOnlyQueryError(MemoryStoreError):
    """A read-only query tried to write, or holds more than one statement."""


class QueryError(MemoryStoreError):
    """A read-only query is malformed, or a bound parameter is missing or malformed."""


class ArtifactError(CodaError):
    """An artifact path is unsafe, or the file is missing or does not match its checksum."""
