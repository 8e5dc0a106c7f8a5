"""The `coda` command: parse, validate, call the library, print. No logic lives here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml
from rich.table import Table

from coda.cli.common import console, fail, one_line_errors

app = typer.Typer(
    name="coda",
    help="CoDA: a simulated data engine and an action policy that co-evolve through a shared memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

PresetOpt = Annotated[Optional[str], typer.Option("--preset", help="tiny | quick | full")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML or JSON config file")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="override, e.g. --set policy.chunk_len=8")]


@app.command()
@one_line_errors
def doctor(
    memory: Annotated[Optional[str], typer.Option("--memory", help="memory URL to check")] = None,
) -> None:
    """Versions, headless MuJoCo rendering, torch threads and the memory URL, checked on this machine."""
    from coda.doctor import run_doctor

    checks = run_doctor(memory)
    table = Table(title="coda doctor")
    for col in ("check", "status", "detail"):
        table.add_column(col)
    for c in checks:
        status = "[green]ok[/]" if c.ok else ("[red]FAIL[/]" if c.required else "[yellow]no[/]")
        table.add_row(c.name, status, c.detail)
    console.print(table)
    if any(c.required and not c.ok for c in checks):
        raise typer.Exit(1)


config_app = typer.Typer(help="Resolve and inspect configurations.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
@one_line_errors
def config_show(preset: PresetOpt = None, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Print the resolved configuration (defaults → preset → file → --set) as YAML."""
    from coda.config import build_config

    cfg = build_config(preset, config, set_ or [])
    console.print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), highlight=False, markup=False)


def main() -> None:  # pragma: no cover - console-script shim
    app()


__all__ = ["app", "main", "fail"]
