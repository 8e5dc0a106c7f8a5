"""Errors shared across CoDA. Each names the field and the value that caused it."""

from __future__ import annotations


class CodaError(Exception):
    """Base class for errors CoDA raises on bad input; the CLI prints them on one line."""


class ConfigError(CodaError):
    """A configuration file, key or value is invalid."""


class SchemaVersionError(CodaError):
    """A stored object or database was written by a newer CoDA schema than this one reads."""


class RegistryError(CodaError, KeyError):
    """An unknown or duplicate name in a registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it a plain line
        return str(self.args[0]) if self.args else ""
