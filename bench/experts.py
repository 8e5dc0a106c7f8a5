"""Scripted-expert success per family and split of the built-in tabletop benchmark.

For every (family, split) the script walks the split's deterministic candidate stream, keeps the scenes
that are physically valid (they build, settle without interpenetration, are reachable and not solved at
reset: `check_validity` with every check but the expert's), and counts how many of those the scripted
expert solves. Writes `bench/results/experts.json`:

    {family: {split: {"n": valid scenes, "success": expert success rate,
                      "candidates": scenes generated, "rejected": {reason: count}, "seconds": wall time}}}

Usage:
    python bench/experts.py                 # 200 valid scenes per cell, one process
    python bench/experts.py --workers 2     # both cores
    python bench/experts.py --fast          # 6 scenes per cell, well under a minute
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from coda.scene.programs import iter_program  # noqa: E402
from coda.scene.spec import FAMILIES, ScenarioSpec  # noqa: E402
from coda.scene.splits import SPLITS, split_program  # noqa: E402

OUT = Path(__file__).parent / "results" / "experts.json"


def judge(spec: ScenarioSpec) -> str:
    """'solved', 'failed' (valid scene, expert did not solve it) or the physics rejection reason."""
    from coda.sim.tabletop.validity import check_validity

    r = check_validity(spec, expert=True)
    if r.valid:
        return "solved"
    return "failed" if r.reason == "expert_failed" else str(r.reason)


def run_cell(family: str, split: str, n: int, seed: int, pool: Executor | None, advance: Any) -> dict[str, Any]:
    """Judge candidates of one split in order until `n` are physically valid (or 3 n + 20 candidates)."""
    t0 = time.perf_counter()
    stream = iter_program(split_program(family, split, n, seed))
    outcomes: Counter[str] = Counter()
    valid = candidates = 0
    budget = 3 * n + 20
    while valid < n and candidates < budget:
        batch = [next(stream) for _ in range(min(budget - candidates, max(2, n - valid)))]
        candidates += len(batch)
        results = pool.map(judge, batch) if pool else map(judge, batch)
        for verdict in results:
            if valid >= n:
                break  # judged but beyond the n-th valid scene: not counted, so workers do not change the result
            outcomes[verdict] += 1
            if verdict in ("solved", "failed"):
                valid += 1
                advance()
    solved = outcomes.pop("solved", 0)
    failed = outcomes.pop("failed", 0)
    return {
        "n": valid,
        "success": round(solved / valid, 4) if valid else 0.0,
        "expert_failed": failed,
        "candidates": sum(outcomes.values()) + valid,
        "rejected": dict(sorted(outcomes.items())),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="valid scenes per family and split")
    ap.add_argument("--seed", type=int, default=1000, help="split seed (evaluation seed, not the training one)")
    ap.add_argument("--fast", action="store_true", help="6 scenes per cell (smoke run)")
    ap.add_argument("--workers", type=int, default=1, help="processes (2 uses both cores)")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--splits", nargs="*", default=list(SPLITS), choices=SPLITS)
    ap.add_argument("--out", type=Path, default=OUT, help="results JSON")
    args = ap.parse_args()
    n = 6 if args.fast else args.n
    console = Console()
    results: dict[str, dict[str, Any]] = {}
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    t0 = time.perf_counter()
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*cols, console=console) as progress:
            task = progress.add_task("valid scenes", total=n * len(args.families) * len(args.splits))
            for family in args.families:
                for split in args.splits:
                    progress.update(task, description=f"{family}/{split}")
                    cell = run_cell(family, split, n, args.seed, pool, lambda: progress.advance(task))
                    results.setdefault(family, {})[split] = cell
                    progress.console.print(  # a line per cell, also when the output is not a terminal
                        f"{family}/{split}: success {cell['success']:.3f} over {cell['n']} valid scenes "
                        f"({cell['candidates']} generated, rejected {cell['rejected']}) in {cell['seconds']} s",
                        highlight=False,
                        soft_wrap=True,
                    )
    finally:
        if pool:
            pool.shutdown()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")

    table = Table(title=f"scripted-expert success, valid scenes in brackets (seed {args.seed})")
    table.add_column("split")
    for family in results:
        table.add_column(family, justify="right")
    for split in args.splits:
        table.add_row(split, *(f"{results[f][split]['success']:.3f} ({results[f][split]['n']})" for f in results))
    console.print(table)
    console.print(f"wrote {args.out} in {time.perf_counter() - t0:.0f} s with {args.workers} worker(s)")


if __name__ == "__main__":
    main()
