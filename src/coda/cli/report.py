"""`coda report RUN_DIR`: rebuild a run's report.html from its memory alone (finished, running or killed runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from coda.cli.common import console, fail, one_line_errors


@one_line_errors
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="the run directory (holds config.yaml, the artifacts and, by default, memory)")],
    memory: Annotated[Optional[str], typer.Option("--memory", help="memory URL (default: the run's configured memory, else the SQLite file in RUN_DIR)")] = None,
    scenes: Annotated[int, typer.Option("--scenes", min=0, help="generated scenes rendered per round (0: none)")] = 4,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="file to write (default: RUN_DIR/report.html)")] = None,
) -> None:
    """Rebuild RUN_DIR/report.html from the run's memory records and artifacts; memory is opened read-only."""
    from coda.engine.context import CONFIG_FILE, load_run_config
    from coda.reports.build import ReportOptions, build_report
    from coda.gl import configure_headless_gl
    from coda.memory import open_memory
    from coda.memory.errors import RecordNotFoundError

    if not run_dir.is_dir():
        fail(f"run directory '{run_dir}' does not exist")
    url, gl = memory, "auto"
    if (run_dir / CONFIG_FILE).is_file():
        cfg = load_run_config(run_dir)
        url, gl = (url if url is not None else cfg.memory.url), cfg.sim.gl_backend
    configure_headless_gl(gl)  # before the simulator that renders the scenes imports MuJoCo
    with open_memory(run_dir, url, readonly=True) as mem:
        run_id = run_dir.resolve().name
        try:
            path = build_report(mem, run_id, run_dir, out, ReportOptions(scenes_per_round=scenes))
        except RecordNotFoundError:
            names = [r.id for r in mem.runs()]
            fail(f"memory {mem.url} holds no run '{run_id}' (the run directory's name); runs there: {names}")
            return
    console.print(f"report: [bold]{path}[/]", highlight=False)


__all__ = ["report_command"]
