"""`coda scenes`: make benchmark splits, show a scene, render a scene to PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from coda.cli.common import console, err_console, one_line_errors
from coda.errors import CodaError

app = typer.Typer(
    help="Make, inspect and render tabletop scenes and benchmark splits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class SceneIndexError(CodaError, IndexError):
    """A scene index outside the file."""


def _scene(path: Path, index: int):  # noqa: ANN202 - ScenarioSpec, imported lazily
    from coda.scene.splits import read_split

    _, specs = read_split(path)
    if not -len(specs) <= index < len(specs):
        raise SceneIndexError(f"--index {index} is out of range: '{path}' holds {len(specs)} scenes")
    return specs[index]


@app.command("make")
@one_line_errors
def make(
    family: Annotated[str, typer.Argument(help="pick_place | stack | push | drawer")],
    split: Annotated[str, typer.Argument(help="sft | position | instruction | task | object | distractor | physics")],
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write")],
    n: Annotated[int, typer.Option("--n", min=1, help="number of scenes")] = 100,
    seed: Annotated[int, typer.Option("--seed", min=0, help="split seed")] = 0,
    check: Annotated[bool, typer.Option("--check/--no-check", help="keep only scenes that pass the simulator's validity check")] = True,
    expert: Annotated[bool, typer.Option("--expert/--no-expert", help="with --check: the scripted expert must also solve the scene")] = True,
    workers: Annotated[int, typer.Option("--workers", min=1, help="processes for the validity check")] = 1,
) -> None:
    """Generate N scenes of a family's split (deterministic in SEED) and write them as versioned JSONL."""
    from coda.scene.splits import build_split, make_split, write_split
    from coda.sim.tabletop.validity import sim_check

    checked = ("expert" if expert else "physics") if check else "no"  # what the kept scenes passed
    meta = {"family": family, "split": split, "seed": seed, "checked": checked}
    if not check:
        specs = make_split(family, split, n, seed)
        write_split(out, specs, **meta)
        console.print(f"wrote {len(specs)} scenes to {out}", highlight=False)
        return
    import functools

    result = build_split(family, split, n, seed, check=functools.partial(sim_check, expert=expert), workers=workers)
    write_split(out, result.valid, **meta)
    console.print(f"wrote {len(result.valid)} valid scenes to {out}; rejected {len(result.rejected)}: {result.reasons()}", highlight=False)
    if len(result.valid) < n:
        err_console.print(f"warning: only {len(result.valid)} of {n} scenes passed the check within the candidate budget")
        raise typer.Exit(1)


@app.command("show")
@one_line_errors
def show(
    path: Annotated[Path, typer.Argument(help="split JSONL file")],
    index: Annotated[int, typer.Option("--index", "-i", help="scene index (negative counts from the end)")] = 0,
) -> None:
    """Print one scene of a split file as indented JSON."""
    spec = _scene(path, index)
    typer.echo(json.dumps(spec.model_dump(mode="json"), indent=2, sort_keys=True))


@app.command("render")
@one_line_errors
def render(
    path: Annotated[Path, typer.Argument(help="split JSONL file")],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write")],
    index: Annotated[int, typer.Option("--index", "-i", help="scene index")] = 0,
    camera: Annotated[str, typer.Option("--camera", help="front | wrist")] = "front",
    size: Annotated[int, typer.Option("--size", min=16, max=4096, help="image width and height in pixels")] = 256,
) -> None:
    """Render the initial state of one scene to a PNG."""
    written = render_scene(_scene(path, index), out, camera=camera, size=size)
    console.print(f"wrote {written}", highlight=False)


@app.command("run")
@one_line_errors
def run(
    program: Annotated[Path, typer.Argument(help="generation program (JSON file)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write")],
) -> None:
    """Run a generation program (unchecked by physics) and write its scenes as versioned JSONL."""
    from coda.scene.programs import load_program, run_program
    from coda.scene.splits import write_split

    if not program.is_file():
        raise SceneIndexError(f"program file '{program}' does not exist")
    prog = load_program(program.read_text(encoding="utf-8"))
    specs = run_program(prog)
    write_split(out, specs, program=prog.name, program_id=prog.program_id, seed=prog.seed, checked="no")
    console.print(f"wrote {len(specs)} scenes to {out}", highlight=False)


@app.command("ops")
@one_line_errors
def ops() -> None:
    """List the registered scene operators and their arguments."""
    from rich.table import Table

    from coda.scene.operators import OPERATORS

    table = Table(title="scene operators")
    for col in ("operator", "what it does", "arguments"):
        table.add_column(col)
    for name in OPERATORS.names():
        op = OPERATORS.get(name)
        table.add_row(name, op.doc, ", ".join(op.args_model.model_fields))
    console.print(table)


def render_scene(spec: object, out: Path, *, camera: str = "front", size: int = 256) -> Path:
    """Render a scene's initial state with the tabletop simulator (imported only when rendering)."""
    from coda.sim.tabletop.render import render_png

    return render_png(spec, out, camera=camera, size=size)  # type: ignore[arg-type]
