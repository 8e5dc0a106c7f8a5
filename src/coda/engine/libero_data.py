"""LIBERO demonstrations and checkpoint evaluation in worker processes.

- `collect_task_demos(units, out_dir, workers=...)`: the scripted expert, acting in CoDA's 5-D targets
  (`coda.sim.libero.targets`), records one episode per scenario into a dataset directory per task unit
  (`coda.policy.data` format, so `coda.policy.train.train_sft` trains on them like on tabletop demos).
- `evaluate_units(checkpoint, units, workers=...)`: a CoDA checkpoint (through `TargetPolicyAdapter`) on
  LIBERO scenarios, one success per scenario.

A unit is one task's scenarios (`TaskUnit`): a worker builds the task's scene once and resets it for each
scenario, so work is split across workers by task, not by episode. Workers are those of an executor
(`coda.runtime.executor`: local processes, or Ray actors; default `workers` local processes); a checkpoint
travels to them by content and demos come back to this process, which alone writes them. Results come back
in input order and do not depend on the number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _executor(executor: Any, workers: int) -> Any:
    from coda.runtime.executor import LocalExecutor

    return executor if executor is not None else LocalExecutor(workers)


def _demo_unit(unit: TaskUnit) -> tuple[list[Any], int, list[str]]:
    """A unit's solved expert demos, the number attempted and the ids the expert failed."""
    import shutil
    import tempfile

    from coda.policy.data import DemoDataset, collect_demos
    from coda.sim.libero.env import LiberoEnv
    from coda.sim.libero.targets import TargetActionEnv, TargetExpert

    env = LiberoEnv()
    tmp = Path(tempfile.mkdtemp(prefix="coda-libero-unit-"))
    try:
        tenv = TargetActionEnv(env)
        report = collect_demos(tenv, list(unit.scenarios), lambda _s: TargetExpert(tenv), tmp / "demos")
        return list(DemoDataset(tmp / "demos").episodes()), report.attempted, list(report.failed_specs)
    finally:
        env.close()
        shutil.rmtree(tmp, ignore_errors=True)


def collect_task_demos(units: Sequence[TaskUnit], out_dir: str | Path, *, workers: int = 1, executor: Any = None,
                       on_done: Callable[[UnitDemos], None] | None = None) -> list[UnitDemos]:
    """Expert demonstrations of every unit into `out_dir/<unit.name>/` (successful episodes only), the units
    run on `executor` (default: `workers` local processes)."""
    from coda.policy.data import DemoWriter

    out: list[UnitDemos] = []
    for unit, (episodes, attempted, failed) in zip(units, _executor(executor, workers).map(_demo_unit, list(units))):
        path = Path(out_dir) / unit.name
        with DemoWriter(path) as writer:
            for ep in episodes:
                writer.add(ep)
        out.append(UnitDemos(unit.name, str(path), attempted, len(episodes), sum(ep.length for ep in episodes), failed))
        if on_done:
            on_done(out[-1])
    return out


_WORKER: dict[str, Any] = {}


def _init_eval(checkpoint: Any, text_cache: Path | None = None) -> None:
    from coda.runtime.executor import local_file
    from coda.sim.libero.env import LiberoEnv

    _WORKER["env"] = LiberoEnv()
    if checkpoint is None:  # the scripted expert
        from coda.engine.libero_eval import ExpertPolicy

        _WORKER["policy"] = ExpertPolicy(_WORKER["env"])
        return
    import torch

    torch.set_num_threads(1)  # two processes on two cores
    from coda.engine.libero_eval import TargetPolicyAdapter
    from coda.policy.text import worker_text_cache
    from coda.policy.checkpoint import load_policy

    worker_text_cache(text_cache)

    policy = load_policy(local_file(checkpoint))
    policy.eval()
    _WORKER["policy"] = TargetPolicyAdapter(policy, env=_WORKER["env"])  # sampling seeded per scenario


def _eval_unit(job: tuple[TaskUnit, int | None]) -> list[tuple[bool, int]]:
    import torch

    from coda.engine.libero_eval import run_episode

    unit, max_steps = job
    with torch.no_grad():
        return [run_episode(_WORKER["env"], _WORKER["policy"], s, max_steps) for s in unit.scenarios]


def _close_eval() -> None:
    env = _WORKER.pop("env", None)
    if env is not None:
        env.close()
    _WORKER.clear()


def evaluate_units(checkpoint: str | Path | None, units: Sequence[TaskUnit], *, workers: int = 1, executor: Any = None,
                   max_steps: int | None = None, on_done: Callable[[TaskUnit, list[tuple[bool, int]]], None] | None = None) -> list[list[tuple[bool, int]]]:
    """(success, control steps) of the checkpoint's policy (None: the scripted expert) on every scenario of
    every unit, in order, each episode capped at `max_steps` (default: the suite's horizon), the units run on
    `executor` (default: `workers` local processes). The policy's sampling is seeded per scenario
    (`episode_seed`), so results do not depend on the workers."""
    from coda.policy.text import text_cache_path

    ex = _executor(executor, workers)
    shipped = None if checkpoint is None else ex.ship(checkpoint)
    out: list[list[tuple[bool, int]]] = []
    jobs = [(u, max_steps) for u in units]
    for u, r in zip(units, ex.map(_eval_unit, jobs, init=_init_eval, initargs=(shipped, text_cache_path()),
                                  close=_close_eval)):
        out.append(r)
        if on_done:
            on_done(u, r)
    return out


__all__ = ["TaskUnit", "UnitDemos", "collect_task_demos", "evaluate_units"]
