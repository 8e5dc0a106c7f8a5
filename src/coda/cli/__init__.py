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

PresetOpt = Annotated[Optional[str], typer.Option("--preset", help="tiny | quick | full | libero")]
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


from coda.cli.memory import app as memory_app  # noqa: E402
from coda.cli.policy import demos_app, eval_command, train_app  # noqa: E402
from coda.cli.report import report_command  # noqa: E402
from coda.cli.scenes import app as scenes_app  # noqa: E402

app.add_typer(memory_app, name="memory")
app.add_typer(scenes_app, name="scenes")
app.add_typer(demos_app, name="demos")
app.add_typer(train_app, name="train")
app.command("eval")(eval_command)
app.command("report")(report_command)

@app.command("run")
@one_line_errors
def run_command(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    strategy: Annotated[Optional[str], typer.Option(help="coda | coda-sparse | replay | accel | plr | dr | dagger | sft")] = None,
    family: Annotated[Optional[list[str]], typer.Option(help="task family (repeatable); default: all four")] = None,
    rounds: Annotated[Optional[int], typer.Option(help="co-evolution rounds after SFT")] = None,
    seed: Annotated[Optional[int], typer.Option(help="master seed")] = None,
    memory: Annotated[Optional[str], typer.Option("--memory", help="memory URL (default: SQLite in the run dir); "
                                                  "with --resume, the run's URL with its password")] = None,
    run_dir: Annotated[Optional[Path], typer.Option("--run-dir", help="run directory to create")] = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", help="continue the run in this directory")] = None,
    from_round0: Annotated[Optional[Path], typer.Option(
        "--from-round0", help="start from this run's committed round 0 (same SFT policy, e.g. across strategies)")] = None,
) -> None:
    """Run CoDA: SFT, then co-evolution rounds; writes memory, checkpoints and report.html to a run directory."""
    from coda.config import build_config
    from coda.engine.loop import resume_run, run, start_run
    from coda.gl import configure_headless_gl
    from coda.reports.build import write_report

    if resume is not None:
        if any(v is not None for v in (preset, config, set_, strategy, family, rounds, seed, run_dir, from_round0)):
            fail("--resume takes the run's own configuration; drop the other options (--memory may give its password)")
        ctx = resume_run(resume, memory)
    else:
        extra = list(set_ or [])
        extra += [f"engine.strategy={strategy}"] if strategy is not None else []
        extra += [f"engine.rounds={rounds}"] if rounds is not None else []
        extra += [f"engine.seed={seed}"] if seed is not None else []
        extra += [f"memory.url={memory}"] if memory is not None else []
        data = {"scene": {"families": list(family)}} if family else None
        cfg = build_config(preset, config, extra, data=data)
        ctx = start_run(cfg, run_dir, from_round0)
    configure_headless_gl(ctx.cfg.sim.gl_backend)  # before the simulator imports MuJoCo
    console.print(f"run directory: [bold]{ctx.run_dir}[/]")
    try:
        result = run(ctx)
        write_report(ctx)
        print_success_change(ctx)
    finally:
        ctx.close()
    console.print(f"report: [bold]{result.run_dir / 'report.html'}[/]")


def print_success_change(ctx: object) -> None:
    """The run's success per evaluation split, first → last measured round, with 95% Wilson intervals."""
    from coda.reports.data import load_report_data, success_change

    first, last, rows = success_change(load_report_data(ctx.memory, ctx.run_id))  # type: ignore[attr-defined]
    if not rows:
        return
    families = list(rows[0].per_family)
    table = Table(title=f"success per split, round {first} → round {last} (all families: 95% Wilson intervals)")
    table.add_column("split")
    for f in families:
        table.add_column(f, justify="right")
    table.add_column("all families", justify="right")
    mark = {1: " [green]↑[/]", -1: " [red]↓[/]", 0: ""}

    def rate(r: object) -> str:
        return "–" if not r.n else f"{r.rate:.2f}"  # type: ignore[attr-defined]

    for row in rows:
        (a_lo, a_hi), (b_lo, b_hi) = row.first.interval(), row.last.interval()
        table.add_row(row.split, *(f"{rate(a)} → {rate(b)}" for a, b in row.per_family.values()),
                      f"{rate(row.first)} [{a_lo:.2f}, {a_hi:.2f}] → {rate(row.last)} [{b_lo:.2f}, {b_hi:.2f}]"
                      + mark[row.outside])
    console.print(table)
    console.print("↑/↓: the last round's interval lies wholly above/below round 0's", style="dim")


config_app = typer.Typer(help="Resolve and inspect configurations.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
@one_line_errors
def config_show(preset: PresetOpt = None, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Print the resolved configuration (defaults → preset → file → --set) as YAML."""
    from coda.config import build_config
    from coda.redact import redact_value

    cfg = build_config(preset, config, set_ or [])
    console.print(yaml.safe_dump(redact_value(cfg.model_dump(mode="json")), sort_keys=False), highlight=False,
                  markup=False)


def main() -> None:  # pragma: no cover - console-script shim
    app()


__all__ = ["app", "main", "fail"]
