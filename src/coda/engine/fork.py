"""Start a run from another run's committed round 0 (`coda run --from-round0 RUN_DIR`).

Round 0 (scenes, expert demos, SFT training, measurement) is the same for every strategy and is most of a
short run's cost. A run started from another run's round 0 copies that run's round-0 records, phase by phase
with their markers, and its round-0 files (demos, SFT checkpoint, training metrics, keyframes), then goes on
with its own rounds. Benchmarks use it so that every strategy starts from the *same* SFT policy, which a fair
comparison needs anyway.

The copy is refused unless the two configurations agree on everything round 0 depends on (`ROUND0_FIELDS`);
the error names the first field that differs and both values. The source is recorded in the run directory
(`round0_source.json`), so a copy killed half-way finishes on `--resume`: files are copied again (they are
overwritten), and only the phases without a marker are committed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from coda.config import CodaConfig
from coda.engine.context import RunContext, RunDirError, load_run_config
from coda.engine.training import AWR_FIELDS, CRITIC_FIELDS

ROUND0_PHASES = ("scenes", "demos", "train", "measure")
ROUND0_FILES = ("demos/round_000", "checkpoints/round_000.pt", "metrics/train_round_000.jsonl", "keyframes/round_000")
SOURCE_FILE = "round0_source.json"
# (section, fields) round 0 depends on; None = the whole section. Fields of later rounds are left out.
ROUND0_FIELDS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("sim", None), ("scene", None), ("bench", ("eval_scenes_per_split",)), ("engine", ("seed",)),
)
POLICY_ROUNDS_ONLY = ("finetune_steps",)  # policy fields only rounds 1.. read


def round0_mismatch(source: CodaConfig, target: CodaConfig) -> str | None:
    """The first round-0 setting on which two configurations differ, in words; None when they agree."""
    a, b = source.model_dump(mode="json"), target.model_dump(mode="json")
    checks: list[tuple[str, Any, Any]] = []
    for section, fields in ROUND0_FIELDS:
        names = fields if fields is not None else tuple(sorted(set(a[section]) | set(b[section])))
        checks += [(f"{section}.{n}", a[section].get(n), b[section].get(n)) for n in names]
    skip = set(POLICY_ROUNDS_ONLY)  # and the critic's settings when round 0 trained none (rounds carry them)
    if not (a["policy"].get("train_critic") or b["policy"].get("train_critic")):
        skip |= set(CRITIC_FIELDS)
    if "awr" not in (a["policy"].get("improvement"), b["policy"].get("improvement")):
        skip |= set(AWR_FIELDS)
    names = sorted((set(a["policy"]) | set(b["policy"])) - skip)
    checks += [(f"policy.{n}", a["policy"].get(n), b["policy"].get(n)) for n in names]
    for name, x, y in checks:
        if x != y:
            return f"{name} = {x!r} there but {y!r} here"
    return None


def write_source(run_dir: Path, source_dir: Path) -> None:
    """Record the round-0 source of a new run directory (read back on resume)."""
    tmp = run_dir / (SOURCE_FILE + ".tmp")
    tmp.write_text(json.dumps({"run_dir": str(source_dir.resolve())}))
    tmp.replace(run_dir / SOURCE_FILE)


def read_source(run_dir: Path) -> Path | None:
    """The round-0 source a run directory was started from, or None."""
    path = run_dir / SOURCE_FILE
    return Path(json.loads(path.read_text())["run_dir"]) if path.is_file() else None


def check_source(source_dir: Path, cfg: CodaConfig) -> CodaConfig:
    """The source run's configuration, after checking it has a committed round 0 that fits `cfg`.

    Raises:
        RunDirError: not a run directory, round 0 not committed there, or a round-0 setting differs.
    """
    src_cfg = load_run_config(source_dir)
    problem = round0_mismatch(src_cfg, cfg)
    if problem:
        raise RunDirError(f"--from-round0 '{source_dir}': round 0 was made with other settings: {problem}")
    from coda.memory import open_memory_from_config

    with open_memory_from_config(source_dir, src_cfg.memory, readonly=True) as mem:
        missing = [p for p in ROUND0_PHASES if not mem.phase_done(source_dir.name, 0, p)]
    if missing:
        raise RunDirError(f"--from-round0 '{source_dir}': round 0 is not committed there (phases without a marker: {missing})")
    return src_cfg


def copy_round0(ctx: RunContext, source_dir: Path) -> None:
    """Copy the source run's round-0 files and records into this run (each phase with its marker).

    Raises:
        RunDirError: see `check_source`.
    """
    if all(ctx.memory.phase_done(ctx.run_id, 0, p) for p in ROUND0_PHASES):
        return
    src_cfg = check_source(source_dir, ctx.cfg)
    for rel in ROUND0_FILES:
        src, dst = source_dir / rel, ctx.run_dir / rel
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    from coda.memory import open_memory_from_config

    with open_memory_from_config(source_dir, src_cfg.memory, readonly=True) as src_mem:
        _copy_records(ctx, src_mem, source_dir.name)


def _copy_records(ctx: RunContext, src_mem: Any, src_run: str) -> None:
    """Records of round 0, phase by phase; foreign keys point at the copies (matched by position)."""
    from coda.memory.models import RECORD_KINDS, PhaseMarker, Run

    kinds = [k for k in RECORD_KINDS if k not in (Run, PhaseMarker)]
    ids: dict[tuple[str, int], int] = {}  # (table, source id) -> id of the copy
    for phase in ROUND0_PHASES:
        per_kind = {k: src_mem.list(k, run_id=src_run, round_idx=0, phase=phase) for k in kinds}
        if not ctx.pending(0, phase):  # copied before a kill: map the ids of what is there
            for k, rows in per_kind.items():
                mine = ctx.memory.list(k, run_id=ctx.run_id, round_idx=0, phase=phase)
                ids.update({(k.__tablename__, a.id): b.id for a, b in zip(rows, mine)})
            continue
        with ctx.commit(0, phase) as tx:
            for k, rows in per_kind.items():
                for rec in rows:
                    ids[(k.__tablename__, rec.id)] = tx.add(_clone(rec, ids)).id


def _clone(rec: Any, ids: dict[tuple[str, int], int]) -> Any:
    """A new record with the same fields as `rec`; run, round, phase and id are set by the transaction."""
    values: dict[str, Any] = {}
    for col in rec.__table__.columns:
        if col.key in ("id", "run_id", "round", "phase"):
            continue
        value = getattr(rec, col.key)
        if value is not None and col.foreign_keys:
            (fk,) = col.foreign_keys
            value = ids[(fk.column.table.name, value)]
        values[col.key] = value
    return type(rec)(**values)


__all__ = ["ROUND0_FIELDS", "ROUND0_FILES", "ROUND0_PHASES", "check_source", "copy_round0", "read_source",
           "round0_mismatch", "write_source"]
