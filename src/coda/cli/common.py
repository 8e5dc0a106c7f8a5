"""Helpers shared by the CLI groups: one-line errors and config resolution from flags."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from coda.errors import CodaError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> None:
    """Print `error: message` on one line to stderr and exit with `code`."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True, highlight=False, markup=True)
    raise typer.Exit(code)


def one_line_errors(fn: F) -> F:
    """Turn CodaError (bad input) into a one-line message and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CodaError as e:
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
        except OSError as e:  # a file the command must read or write: say which and why
            where = f" '{e.filename}'" if e.filename else ""
            fail(f"cannot use{where}: {e.strerror or type(e).__name__}")
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
