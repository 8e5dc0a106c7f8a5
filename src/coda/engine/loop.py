"""The run, top to bottom: round 0 fits the SFT policy, then co-evolution rounds follow.

Round 0 (every strategy):
    scenes   → the fixed evaluation splits (sft in-distribution + OOD axes) and the SFT training scenes
    demos    → expert demonstrations in the SFT training scenes
    train    → behaviour cloning: the SFT policy checkpoint
    measure  → the SFT policy on every evaluation split

Rounds 1..R are run by the strategy (`coda.engine.strategies`) with the same phase discipline.

A run started with `from_round0` (`coda run --from-round0 RUN_DIR`) copies round 0 from another run instead
(`coda.engine.fork`), so strategies compared in a benchmark share one SFT policy. The `sft` strategy runs
no rounds whatever `engine.rounds` says.

Each phase is a function of the run context that returns its outputs; it commits all its records together with
its phase marker (`memory.phase`), so a run killed anywhere resumes (`coda run --resume RUN_DIR`) by re-running
exactly the phases without a marker. Files a phase writes are written before its commit, atomically, under
names fixed by (round, phase), so a re-run overwrites a killed attempt's leftovers instead of adding to them.
Every random draw is seeded from the master seed and the (round, phase) it belongs to, so a resumed run ends
with the same memory contents as one that was never interrupted.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coda.config import CodaConfig
from coda.engine.context import (
    CONFIG_FILE,
    LOCK_FILE,
    RunContext,
    RunDirError,
    RunDirLock,
    load_run_config,
    new_run_dir,
    write_config,
)
from coda.engine.rollout import Rollout, evaluate_checkpoint
from coda.errors import CodaError
from coda.scene.spec import ScenarioSpec


@dataclass
class RunResult:
    run_dir: Path
    run_id: str
    success: dict[int, dict[str, dict[str, float]]]  # round -> family -> split -> success rate


def progress_bar(console: Any) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


# ---- phases of round 0 ------------------------------------------------------------------------------

def phase_scenes(ctx: RunContext) -> dict[str, dict[str, list[ScenarioSpec]]]:
    """Build the SFT training scenes and the evaluation splits per family (validated in the simulator).

    Returns:
        {family: {"train": [...], "sft": [...], "position": [...], ...}}; rejected candidates are stored as
        invalid Scenario records with their reasons.
    """
    from coda.memory import Scenario

    mem, cfg, backend = ctx.memory, ctx.cfg, ctx.backend
    if ctx.pending(0, "scenes"):
        jobs = [(f, "train", "sft", cfg.scene.sft_scenes_per_family) for f in ctx.families]
        jobs += [(f, s, s, cfg.bench.eval_scenes_per_split) for f in ctx.families for s in backend.eval_splits]
        records: list[Any] = []
        with progress_bar(ctx.console) as bar:
            task = bar.add_task("round 0 · scenes", total=len(jobs))
            for family, name, split, n in jobs:
                valid, rejected = backend.build_split(family, name, split, n, ctx.seed_for("scenes", family, name))
                records += [Scenario.from_spec(s, split=name) for s in valid]
                records += [Scenario.from_spec(spec, split=name, valid=False, invalid_reason=reason)
                            for spec, reason in rejected]
                bar.advance(task)
        with ctx.commit(0, "scenes") as tx:
            tx.add_all(_unique(records), exist_ok=True)
    out: dict[str, dict[str, list[Any]]] = {f: {} for f in ctx.families}
    for rec in mem.list("scenario", run_id=ctx.run_id, round_idx=0):
        if rec.valid and rec.family in out:
            out[rec.family].setdefault(rec.split, []).append(backend.scenario_from_dict(rec.spec))
    return out


def _unique(records: list[Any]) -> list[Any]:
    # The same scene can come out of two splits' streams; memory keys scenarios by content in a round.
    seen: set[str] = set()
    out = []
    for r in records:
        if r.spec_id not in seen:
            seen.add(r.spec_id)
            out.append(r)
    return out


def phase_demos(ctx: RunContext, round_idx: int, specs: Sequence[ScenarioSpec], name: str = "demos") -> Path:
    """Expert demonstrations in `specs`, written as a dataset directory `demos/round_RRR`."""
    from coda.memory import TrainingProgram

    final = ctx.run_dir / "demos" / f"round_{round_idx:03d}"
    if not ctx.pending(round_idx, name):
        return final
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    report = ctx.backend.collect_demos(list(specs), tmp)  # Φ of each scene's canonical stage plan attached
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    body = {"kind": "expert_demos", "demos": ctx.rel(final), "scenes": report.attempted,
            "episodes": report.written, "steps": report.steps, "expert_failures": report.failed_specs}
    with ctx.commit(round_idx, name) as tx:
        tx.add(TrainingProgram(key=f"demos_r{round_idx}", body=body))
    return final


def phase_train(ctx: RunContext, round_idx: int, demo_dirs: Sequence[Path], *, steps: int,
                init_from: Path | None = None) -> Path:
    """Behaviour cloning on `demo_dirs` (from scratch, or fine-tuning `init_from`) → checkpoint file."""
    from coda.memory import Checkpoint
    from coda.memory.artifacts import sha256_file
    from coda.policy.train import train_sft

    ckpt = ctx.path("checkpoints", f"round_{round_idx:03d}.pt")
    if not ctx.pending(round_idx, "train"):
        return ckpt
    import torch

    torch.manual_seed(ctx.seed_for("train", round_idx))  # initialisation: the same on a resumed run
    _, result = train_sft(demo_dirs, ctx.cfg.policy, ckpt, steps=steps, progress=True,
                          metrics_path=ctx.path("metrics", f"train_round_{round_idx:03d}.jsonl"))
    digest, _ = sha256_file(ckpt)
    metrics = {k: v for k, v in vars(result).items() if isinstance(v, (int, float, str))}
    with ctx.commit(round_idx, "train") as tx:
        tx.add(Checkpoint(path=ctx.rel(ckpt), sha256=digest, metrics=metrics))
    return ckpt


def phase_measure_splits(ctx: RunContext, round_idx: int, checkpoint: Path,
                         splits: dict[str, dict[str, list[ScenarioSpec]]], *, keyframes: int | None = None,
                         extra_records: Callable[[], list[Any]] | None = None) -> dict[str, dict[str, float]]:
    """Roll the checkpoint out on every evaluation split (phase "measure"); episodes to memory, with
    keyframes of failures. `extra_records` (e.g. learning progress) is computed only when the phase runs and
    commits with it.

    Returns:
        {family: {split: success rate}}.
    """
    from coda.memory import Episode, Scenario

    mem = ctx.memory
    if keyframes is None:
        keyframes = ctx.backend.measure_keyframes
    if ctx.pending(round_idx, "measure"):
        jobs = [(f, s, spec) for f in ctx.families for s in ctx.backend.eval_splits for spec in splits[f].get(s, [])]
        with progress_bar(ctx.console) as bar:
            task = bar.add_task(f"round {round_idx} · measure", total=len(jobs))
            rollouts = evaluate_checkpoint(checkpoint, [j[2] for j in jobs], ctx.cfg.sim,
                                           workers=ctx.cfg.runtime.workers, batch=ctx.cfg.runtime.rollout_batch,
                                           executor=ctx.executor, keyframes=keyframes,
                                           record_states=False, on_done=lambda i, r: bar.advance(task))
        scen_ids = {r.spec_id: r.id for r in mem.list("scenario", run_id=ctx.run_id)}
        ckpt_rec = [c for c in mem.list("checkpoint", run_id=ctx.run_id) if c.path == ctx.rel(checkpoint)]
        files = [_episode_artifacts(ctx, round_idx, "measure", i, r) for i, r in enumerate(rollouts)]
        extra = extra_records() if extra_records is not None else []
        with ctx.commit(round_idx, "measure") as tx:
            tx.add_all(extra)
            for (family, split, spec), r, arts in zip(jobs, rollouts, files):
                sid = scen_ids.get(spec.spec_id)
                if sid is None:  # a scene first seen in this round
                    sid = tx.add(Scenario.from_spec(spec, split=split), exist_ok=True).id
                tx.add(Episode(scenario_id=sid, policy="policy", checkpoint_id=ckpt_rec[0].id if ckpt_rec else None,
                               seed=0, success=r.success, episode_return=r.episode_return, length=r.length,
                               artifacts=arts, info={"family": family, "split": split, "kind": "eval",
                                                     "error": r.error}),
                       exist_ok=True)
    return success_table(ctx, round_idx)


def _episode_artifacts(ctx: RunContext, round_idx: int, phase: str, i: int, r: Rollout) -> dict[str, Any]:
    """Keyframes of failed episodes as PNG files (successes need no diagnosis)."""
    if r.success or not r.keyframes:
        return {}
    from PIL import Image

    from coda.memory import ArtifactStore

    store = ArtifactStore(ctx.run_dir)
    out = {}
    for t, frame in r.keyframes.items():
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(frame)).save(buf, format="PNG")
        ref = store.put_bytes(f"keyframes/round_{round_idx:03d}/{phase}_{i:05d}_t{t:03d}.png", buf.getvalue())
        out[f"keyframe_t{t:03d}"] = ref.to_dict()
    return out


def success_table(ctx: RunContext, round_idx: int, phase: str = "measure") -> dict[str, dict[str, float]]:
    """Success rate per family and split of the policy's episodes on the evaluation splits in one round."""
    counts: dict[tuple[str, str], list[int]] = {}
    for e in ctx.memory.list("episode", run_id=ctx.run_id, round_idx=round_idx):
        if e.phase != phase or e.policy != "policy":
            continue
        c = counts.setdefault((e.info["family"], e.info["split"]), [0, 0])
        c[0] += int(e.success)
        c[1] += 1
    out: dict[str, dict[str, float]] = {}
    for (family, split), (k, n) in sorted(counts.items()):
        out.setdefault(family, {})[split] = k / n
    return out


# ---- the run ----------------------------------------------------------------------------------------

def check_names(cfg: CodaConfig) -> None:
    """Every registered name the configuration uses (strategy, critics) exists.

    Raises:
        ConfigError: naming the field, the value and the names available.
    """
    from coda.critic.base import CRITICS
    from coda.engine.strategies import STRATEGIES
    from coda.errors import ConfigError

    for field, registry, name in (("engine.strategy", STRATEGIES, cfg.engine.strategy),
                                  ("critic.name", CRITICS, cfg.critic.name),
                                  ("critic.fallback", CRITICS, cfg.critic.fallback),
                                  ("critic.noisy_base", CRITICS, cfg.critic.noisy_base)):
        if name is not None and name not in registry:
            raise ConfigError(f"{field} = {name!r} is not registered. Available: {sorted(registry)}")


def start_run(cfg: CodaConfig, run_dir: Path | None = None, from_round0: Path | None = None) -> RunContext:
    """Create a run directory (or use the given empty one), write the resolved config, open memory.

    Args:
        cfg: the resolved configuration.
        run_dir: the run directory (default: a new one under `runtime.run_root`).
        from_round0: a run directory whose committed round 0 this run starts from (see `coda.engine.fork`).

    Raises:
        RunDirError: the run directory is not empty, or `from_round0` has no committed round 0 made with the
            same round-0 settings.
        ConfigError: an unknown strategy or critic name.
    """
    from coda.engine.fork import check_source, write_source
    from coda.memory import open_memory_from_config

    check_names(cfg)  # an unknown name fails before anything is written
    if from_round0 is not None:
        check_source(Path(from_round0), cfg)
    if run_dir is not None and run_dir.exists() and any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        raise RunDirError(f"run directory '{run_dir}' already exists and is not empty; use --resume to continue it")
    run_dir = run_dir or new_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunDirLock(run_dir)
    if (run_dir / CONFIG_FILE).exists():  # another process started it between the check and the lock
        lock.release()
        raise RunDirError(f"run directory '{run_dir}' already exists and is not empty; use --resume to continue it")
    write_config(cfg, run_dir)
    if from_round0 is not None:
        write_source(run_dir, Path(from_round0))
    mem = open_memory_from_config(run_dir, cfg.memory)
    run_id = run_dir.name
    mem.create_run(run_id, config=cfg.model_dump(mode="json"), seed=cfg.engine.seed,
                   strategy=cfg.engine.strategy, exist_ok=True)
    return RunContext(cfg=cfg, run_dir=run_dir, run_id=run_id, memory=mem, families=tuple(cfg.scene.families),
                      lock=lock)


def resume_run(run_dir: Path, memory_url: str | None = None) -> RunContext:
    """Reopen a run directory with the configuration it was started with.

    Args:
        memory_url: the memory URL with its password, when `config.yaml` holds it masked (the same URL
            otherwise; a different database is refused).

    Raises:
        RunDirError: not a run directory; the memory URL's password is masked and none was given; the given
            URL is not the run's.
    """
    from coda.memory import open_memory_from_config
    from coda.redact import has_redacted_password, redact_url

    cfg = load_run_config(run_dir)
    stored = cfg.memory.url
    if memory_url is not None:
        if redact_url(memory_url) != redact_url(stored):
            raise RunDirError(f"--memory {redact_url(memory_url)} is not the memory of run '{run_dir}' "
                              f"({redact_url(stored) or 'SQLite in the run directory'})")
        cfg = cfg.model_copy(update={"memory": cfg.memory.model_copy(update={"url": memory_url})})
    elif has_redacted_password(stored):
        raise RunDirError(f"memory.url in {Path(run_dir) / CONFIG_FILE} has its password masked ({stored}); "
                          "give the URL again: coda run --resume RUN --memory URL")
    run_dir = Path(run_dir).resolve()
    lock = RunDirLock(run_dir)
    try:
        # The run must be in its memory under the directory's name: a renamed directory or a memory file that
        # went missing would otherwise start again from round 0.
        mem = open_memory_from_config(run_dir, cfg.memory, create=False)
        try:
            mem.get_run(run_dir.name)
        except CodaError as e:
            mem.close()
            raise RunDirError(f"cannot resume '{run_dir}': {e} (a run's memory names it after its directory; "
                              "was the directory renamed?)") from None
    except BaseException:
        lock.release()
        raise
    return RunContext(cfg=cfg, run_dir=run_dir, run_id=run_dir.name, memory=mem,
                      families=tuple(cfg.scene.families), lock=lock)


def run(ctx: RunContext) -> RunResult:
    """Round 0 (SFT, or copied from the run's round-0 source), then the strategy's rounds (`coda run` then
    writes `report.html`: `coda.reports`)."""
    from coda.engine.fork import copy_round0, read_source
    from coda.engine.round import run_round
    from coda.engine.strategies import make_strategy
    from coda.policy.text import use_text_cache
    from coda.runtime.config import text_cache_file

    cfg = ctx.cfg
    use_text_cache(text_cache_file(cfg.runtime, ctx.run_dir))  # this process's and its workers' embeddings
    strategy = make_strategy(ctx)
    source = read_source(ctx.run_dir)
    if source is not None:
        copy_round0(ctx, source)
    try:
        splits = phase_scenes(ctx)
        demos = phase_demos(ctx, 0, [s for f in ctx.families for s in splits[f].get("train", [])])
        ckpt = phase_train(ctx, 0, [demos], steps=cfg.policy.train_steps)
        results = {0: phase_measure_splits(ctx, 0, ckpt, splits)}
        demo_dirs = [demos]
        for r in range(1, (cfg.engine.rounds if strategy.runs_rounds else 0) + 1):
            ckpt, new_demos, results[r] = run_round(ctx, r, strategy, ckpt, splits, demo_dirs)
            demo_dirs.append(new_demos)
    finally:
        ctx.backend.close()  # its worker processes, if any
    ctx.memory.set_run_status(ctx.run_id, "done")
    return RunResult(run_dir=ctx.run_dir, run_id=ctx.run_id, success=results)
