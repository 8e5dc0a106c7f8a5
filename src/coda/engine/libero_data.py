"""LIBERO demonstrations and checkpoint evaluation in worker processes.

- `collect_task_demos(units, out_dir, workers=...)`: the scripted expert, acting in CoDA's 5-D targets
  (`coda.sim.libero.targets`), records one episode per scenario into a dataset directory per task unit
  (`coda.policy.data` format, so `coda.policy.train.train_sft` trains on them like on tabletop demos).
- `evaluate_units(checkpoint, units, workers=...)`: a CoDA checkpoint (through `TargetPolicyAdapter`) on
  LIBERO scenarios, one success per scenario.

A unit is one task's scenarios (`TaskUnit`): a worker builds the task's scene once and resets it for each
scenario, so work is split across processes by task, not by episode. Results come back in input order and
do not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.sim.libero.scenario import LiberoScenario


@dataclass(frozen=True)
class TaskUnit:
    """Scenarios of one task, run by one worker in order."""

    name: str  # e.g. "libero_object_3": names the unit's dataset directory
    scenarios: tuple[LiberoScenario, ...]


@dataclass
class UnitDemos:
    """What collecting one unit's demonstrations produced."""

    name: str
    path: str
    attempted: int
    succeeded: int
    steps: int
    failed: list[str] = field(default_factory=list)  # spec ids of scenarios the expert did not solve


def _pool(workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = ()) -> ProcessPoolExecutor:
    ctx = mp.get_context("forkserver" if os.name == "posix" else "spawn")
    return ProcessPoolExecutor(workers, mp_context=ctx, initializer=initializer, initargs=initargs)


def _demo_unit(args: tuple[TaskUnit, str]) -> UnitDemos:
    from coda.policy.data import collect_demos
    from coda.sim.libero.env import LiberoEnv
    from coda.sim.libero.targets import TargetActionEnv, TargetExpert

    unit, out_dir = args
    path = Path(out_dir) / unit.name
    env = LiberoEnv()
    try:
        tenv = TargetActionEnv(env)
        report = collect_demos(tenv, list(unit.scenarios), lambda _s: TargetExpert(tenv), path)
    finally:
        env.close()
    return UnitDemos(unit.name, str(path), report.attempted, report.succeeded, report.steps, list(report.failed_specs))


def collect_task_demos(units: Sequence[TaskUnit], out_dir: str | Path, *, workers: int = 1,
                       on_done: Callable[[UnitDemos], None] | None = None) -> list[UnitDemos]:
    """Expert demonstrations of every unit into `out_dir/<unit.name>/` (successful episodes only)."""
    jobs = [(u, str(out_dir)) for u in units]
    out: list[UnitDemos] = []
    if workers <= 1:
        for job in jobs:
            out.append(_demo_unit(job))
            if on_done:
                on_done(out[-1])
        return out
    with _pool(workers) as pool:
        for r in pool.map(_demo_unit, jobs, chunksize=1):
            out.append(r)
            if on_done:
                on_done(r)
    return out


_WORKER: dict[str, Any] = {}


def _init_eval(checkpoint: str | None) -> None:
    from coda.sim.libero.env import LiberoEnv

    _WORKER["env"] = LiberoEnv()
    if checkpoint is None:  # the scripted expert
        from coda.engine.libero_eval import ExpertPolicy

        _WORKER["policy"] = ExpertPolicy(_WORKER["env"])
        return
    import torch

    torch.set_num_threads(1)  # two processes on two cores
    from coda.engine.libero_eval import TargetPolicyAdapter
    from coda.policy.checkpoint import load_policy

    policy = load_policy(checkpoint)
    policy.eval()
    _WORKER["policy"] = TargetPolicyAdapter(policy, env=_WORKER["env"])  # sampling seeded per scenario


def _eval_unit(job: tuple[TaskUnit, int | None]) -> list[tuple[bool, int]]:
    import torch

    from coda.engine.libero_eval import run_episode

    unit, max_steps = job
    with torch.no_grad():
        return [run_episode(_WORKER["env"], _WORKER["policy"], s, max_steps) for s in unit.scenarios]


def evaluate_units(checkpoint: str | Path | None, units: Sequence[TaskUnit], *, workers: int = 1,
                   max_steps: int | None = None, on_done: Callable[[TaskUnit, list[tuple[bool, int]]], None] | None = None) -> list[list[tuple[bool, int]]]:
    """(success, control steps) of the checkpoint's policy (None: the scripted expert) on every scenario of
    every unit, in order, each episode capped at `max_steps` (default: the suite's horizon). The policy's
    sampling is seeded per scenario (`episode_seed`), so results do not depend on `workers`."""
    out: list[list[tuple[bool, int]]] = []
    if workers <= 1:
        _init_eval(None if checkpoint is None else str(checkpoint))
        try:
            for u in units:
                out.append(_eval_unit((u, max_steps)))
                if on_done:
                    on_done(u, out[-1])
        finally:
            _WORKER.pop("env").close()
            _WORKER.clear()
        return out
    with _pool(workers, _init_eval, (None if checkpoint is None else str(checkpoint),)) as pool:
        for u, r in zip(units, pool.map(_eval_unit, [(u, max_steps) for u in units], chunksize=1)):
            out.append(r)
            if on_done:
                on_done(u, r)
    return out


__all__ = ["TaskUnit", "UnitDemos", "collect_task_demos", "evaluate_units"]
