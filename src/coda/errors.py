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


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its type's name when it has none), for one-line
    reasons and errors."""
    try:
        text = str(exc)[:2000]
    except Exception:  # noqa: BLE001 - an exception whose message cannot be built
        text = ""
    return next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
