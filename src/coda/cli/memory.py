"""`coda memory`: inspect a run's shared memory (runs, phases, counts, one record, read-only SQL).

Every command opens the memory read-only: inspecting a run never writes to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.table import Table

from coda.cli.common import console, one_line_errors

if TYPE_CHECKING:
    from coda.memory.store import Memory

app = typer.Typer(
    help="Inspect the shared memory of a run (read-only).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

RunDirArg = Annotated[Path, typer.Argument(help="run directory (holds memory.sqlite and the artifacts)")]
MemoryOpt = Annotated[
    Optional[str],
    typer.Option("--memory", help="memory URL, e.g. postgresql+psycopg://user@host/db (default: RUN_DIR/memory.sqlite)"),
]


def _open(run_dir: Path, url: str | None) -> "Memory":
    from coda.memory.connect import open_memory
    from coda.memory.errors import MemoryNotFoundError

    if url is None and not run_dir.is_dir():
        raise MemoryNotFoundError(f"run directory '{run_dir}' does not exist")
    return open_memory(run_dir, url, readonly=True)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


@app.command("ls")
@one_line_errors
def ls(
    run_dir: RunDirArg,
    memory: MemoryOpt = None,
    run: Annotated[Optional[str], typer.Option("--run", help="only this run")] = None,
) -> None:
    """Runs, the phases each round committed, and records per kind."""
    with _open(run_dir, memory) as mem, mem.snapshot() as view:
        runs = [view.get_run(run)] if run is not None else view.runs()
        if not runs:
            console.print(f"no runs in memory {mem.url}", highlight=False)
            return
        table = Table(title=f"runs in {mem.url}")
        for col in ("run", "created", "strategy", "seed", "status", "phases committed"):
            table.add_column(col)
        done = {r.id: view.completed_phases(r.id) for r in runs}
        for r in runs:
            table.add_row(r.id, r.created.strftime("%Y-%m-%d %H:%M:%S"), r.strategy, str(r.seed), r.status, str(len(done[r.id])))
        console.print(table)
        for r in runs:
            rounds: dict[int, list[str]] = {}
            for rnd, phase in done[r.id]:
                rounds.setdefault(rnd, []).append(phase)
            phases = Table(title=f"phases of run {r.id}")
            phases.add_column("round", justify="right")
            phases.add_column("committed phases, in order")
            for rnd in sorted(rounds):
                phases.add_row(str(rnd), ", ".join(rounds[rnd]))
            if rounds:
                console.print(phases)
        counts = Table(title="records per kind")
        counts.add_column("kind")
        per_run = {r.id: view.counts(r.id) for r in runs}
        for r in runs:
            counts.add_column(r.id, justify="right")
        for kind in next(iter(per_run.values())):
            counts.add_row(kind, *(str(per_run[r.id][kind]) for r in runs))
        console.print(counts)


@app.command("show")
@one_line_errors
def show(
    run_dir: RunDirArg,
    kind: Annotated[str, typer.Argument(help="record kind: run, phase, scenario, episode, diagnosis, ...")],
    record_id: Annotated[str, typer.Argument(metavar="ID", help="record id (a run's id is its name)")],
    memory: MemoryOpt = None,
) -> None:
    """One record as JSON."""
    from coda.config_base import INT_MAX, INT_MIN
    from coda.memory.errors import QueryError
    from coda.memory.store import resolve_kind

    model = resolve_kind(kind)
    key: Any = record_id
    if model.__kind__ != "run":
        try:
            key = int(record_id)
        except ValueError:
            raise QueryError(f"{model.__kind__} id {record_id[:40]!r} is invalid: expected an integer") from None
        if not INT_MIN <= key <= INT_MAX:
            raise QueryError(f"{model.__kind__} id {record_id[:40]} is out of range: ids are 64-bit integers")
    with _open(run_dir, memory) as mem:
        record = mem.get(model, key)
    typer.echo(json.dumps(record.to_dict(), indent=2, default=str))


@app.command("sql")
@one_line_errors
def sql(
    run_dir: RunDirArg,
    query: Annotated[str, typer.Argument(help="one read statement with :name placeholders, e.g. 'SELECT ...'")],
    param: Annotated[
        Optional[list[str]],
        typer.Option("--param", "-p", help="bind a placeholder: name=value (name:str=value keeps a string)"),
    ] = None,
    memory: MemoryOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print rows as a JSON list of objects")] = False,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="print at most this many rows")] = 1000,
    timeout: Annotated[float, typer.Option("--timeout", min=0.001, help="stop the statement after this many seconds")] = 30.0,
) -> None:
    """Run a read-only SQL query; writes are refused and parameters are bound, never pasted into the text."""
    from coda.memory.query import parse_params, run_readonly_query

    params = parse_params(param or [])
    with _open(run_dir, memory) as mem:
        result = run_readonly_query(mem, query, params, max_rows=max_rows, timeout_s=timeout)
    if as_json:
        typer.echo(json.dumps([dict(zip(result.columns, row)) for row in result.rows], indent=2, default=str))
        return
    table = Table(caption=f"{len(result.rows)} row(s)" + (f", first {max_rows} shown" if result.truncated else ""))
    for col in result.columns:
        table.add_column(col)
    for row in result.rows:
        table.add_row(*(_cell(v) for v in row))
    console.print(table, highlight=False)
