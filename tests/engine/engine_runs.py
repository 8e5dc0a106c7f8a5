"""Engine runs shared by the end-to-end engine tests (imported by several test modules, built once per session).

One round 0 (the `tiny` preset on pick_place) is run once; every strategy then runs one round from it
(`start_run(..., from_round0=...)`), in this process. The runs are kept in a session temporary directory and
memoised here, so the strategy tests and the resume tests share them.

Test settings on top of `tiny`: the hashing sentence embedder (these tests are not about language), one torch
thread (bit-identical training on a resumed run), and an 80-step horizon (the pick-place expert needs about
45 steps; a failing policy no longer runs 200).
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from coda.config import CodaConfig, build_config

FAMILY = "pick_place"
SETTINGS = ("policy.text_model=hashing", "policy.torch_threads=1", "sim.max_steps=80")
ROUND_STRATEGIES = ("coda", "coda-sparse", "replay", "accel", "plr", "dr", "dagger")
TIMINGS = ("wall_s", "samples_per_s")  # checkpoint metrics that measure time, not the policy
_ROOT: list[Path] = []
_RUNS: dict[str, Path] = {}


def settings(strategy: str, rounds: int = 1, extra: tuple[str, ...] = ()) -> list[str]:
    """The `--set` overrides of a test run (the CLI adds the family)."""
    return [*SETTINGS, f"engine.strategy={strategy}", f"engine.rounds={rounds}", *extra]


def config(strategy: str, rounds: int = 1, extra: tuple[str, ...] = ()) -> CodaConfig:
    """The resolved configuration of a test run, as `coda run --preset tiny --family pick_place --set ...` makes it."""
    return build_config("tiny", overrides=settings(strategy, rounds, extra), data={"scene": {"families": [FAMILY]}})


def root() -> Path:
    """The session's directory of shared runs."""
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="coda-engine-runs-")))
        atexit.register(shutil.rmtree, _ROOT[0], ignore_errors=True)
    return _ROOT[0]


def round0() -> Path:
    """The shared round-0 run (strategy sft: round 0 only)."""
    if "round0" not in _RUNS:
        from coda.engine.loop import run, start_run

        with start_run(config("sft", 0), root() / "round0") as ctx:
            run(ctx)
        _RUNS["round0"] = root() / "round0"
    return _RUNS["round0"]


def strategy_run(strategy: str) -> Path:
    """One round of `strategy` from the shared round 0, and its `report.html` for coda (the others' reports are
    covered by their own tests)."""
    if strategy not in _RUNS:
        from coda.engine.loop import run, start_run
        from coda.reports.build import write_report

        path = root() / strategy
        with start_run(config(strategy), path, from_round0=round0()) as ctx:
            run(ctx)
            if strategy == "coda":
                write_report(ctx)
        _RUNS[strategy] = path
    return _RUNS[strategy]


def coda_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`coda ARGS` in a subprocess (the installed entry point's module)."""
    return subprocess.run([sys.executable, "-m", "coda", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def open_run(run_dir: Path) -> Any:
    from coda.memory import open_memory

    return open_memory(run_dir, readonly=True)


def weights_digest(path: Path) -> str:
    """sha256 of a checkpoint's contents except its `meta` (which names the run directory's demo folders)."""
    import hashlib

    import torch

    from coda.policy.checkpoint import read_checkpoint

    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, dict):
            for key in sorted(x, key=str):
                h.update(str(key).encode())
                feed(x[key])
        elif isinstance(x, torch.Tensor):
            h.update(x.detach().cpu().contiguous().numpy().tobytes())
        else:
            h.update(repr(x).encode())

    feed({k: v for k, v in read_checkpoint(path).items() if k != "meta"})
    return h.hexdigest()


def memory_contents(run_dir: Path, rounds: tuple[int, ...] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every record of a run by kind, in id order, as comparable data: ids, run ids and timestamps left out,
    references replaced by the referenced record's position among its kind (so two runs compare equal when
    they hold the same records in the same order). The phase markers are listed as (round, phase) in commit
    order."""
    from coda.memory.models import RECORD_KINDS, PhaseMarker, Run

    with open_run(run_dir) as mem:
        run_id = run_dir.name
        kinds = [k for k in RECORD_KINDS if k not in (Run, PhaseMarker)]
        rows = {k.__tablename__: mem.list(k, run_id=run_id) for k in kinds}
        position = {(t, r.id): i for t, recs in rows.items() for i, r in enumerate(recs)}
        out: dict[str, list[dict[str, Any]]] = {}
        for k in kinds:
            items = []
            for rec in rows[k.__tablename__]:
                if rounds is not None and rec.round not in rounds:
                    continue
                item = {}
                for col in rec.__table__.columns:
                    value = getattr(rec, col.key)
                    if col.key in ("id", "run_id"):
                        continue
                    if k.__kind__ == "checkpoint" and col.key == "sha256":  # the file records its absolute demo paths
                        value = weights_digest(run_dir / rec.path)
                    if col.key == "metrics":  # timings differ from run to run
                        value = {m: v for m, v in value.items() if m not in TIMINGS}
                    if value is not None and col.foreign_keys:
                        (fk,) = col.foreign_keys
                        value = position[(fk.column.table.name, value)]
                    item[col.key] = value
                items.append(item)
            out[k.__kind__] = items
        out["phase"] = [{"round": r, "phase": p} for r, p in mem.completed_phases(run_id)
                        if rounds is None or r in rounds]
    return out
