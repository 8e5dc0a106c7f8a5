"""`coda demos collect`, `coda train sft`, `coda eval`: thin wrappers over `coda.policy` and the splits.

Mounted by `coda.cli`: `demos_app` as `coda demos`, `train_app` as `coda train`, `eval_command` as
`coda eval`. Training scenes default to split seed 0 and evaluation scenes to seed 1, so a policy is never
evaluated on the exact scenes it was trained on (OOD splits share the per-scene stream of their seed's
sft split: see `coda.scene.splits`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from coda.cli.common import console, err_console, one_line_errors
from coda.errors import CodaError

PresetOpt = Annotated[Optional[str], typer.Option("--preset", help="tiny | quick | full | libero")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML or JSON config file")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="override, e.g. --set policy.chunk_len=8")]
FamilyOpt = Annotated[str, typer.Option("--family", help="pick_place | stack | push | drawer")]
SplitOpt = Annotated[str, typer.Option("--split", help="sft | position | instruction | task | object | distractor | physics")]

demos_app = typer.Typer(help="Expert demonstrations.", no_args_is_help=True, add_completion=False,
                        pretty_exceptions_enable=False)
train_app = typer.Typer(help="Policy training.", no_args_is_help=True, add_completion=False,
                        pretty_exceptions_enable=False)


def _scenes(family: str, split: str, n: int, seed: int, check: bool, workers: int = 1) -> list[Any]:
    """n scenes of a split; with `check`, only scenes the simulator builds and the expert solves."""
    from coda.scene.splits import build_split, make_split
    from coda.sim.tabletop.validity import sim_check

    if not check:
        return make_split(family, split, n, seed)
    result = build_split(family, split, n, seed, check=sim_check, workers=workers)
    if len(result.valid) < n:
        err_console.print(f"warning: only {len(result.valid)} of {n} scenes passed the validity check: {result.reasons()}")
    return result.valid


@demos_app.command("collect")
@one_line_errors
def demos_collect(
    family: FamilyOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="dataset directory to write")],
    split: SplitOpt = "sft",
    n: Annotated[int, typer.Option("--n", min=1, help="number of scenes")] = 200,
    seed: Annotated[int, typer.Option("--seed", min=0, help="split seed (training data: 0)")] = 0,
    check: Annotated[bool, typer.Option("--check/--no-check", help="keep only scenes that pass the validity check")] = True,
    append: Annotated[bool, typer.Option("--append", help="add to an existing dataset")] = False,
    keep_failures: Annotated[bool, typer.Option("--keep-failures", help="also store episodes the expert failed")] = False,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Record one scripted-expert episode per scene of FAMILY/SPLIT into a Parquet demo dataset, with what the
    engine's demos carry: Φ of the scene's canonical stage plan, the train-tier wordings of its goal and the
    entity rows its goal names (the task frame and the grounding labels read them)."""
    import numpy as np

    from coda.config import build_config
    from coda.engine.backend import RoundBackend
    from coda.policy.data import collect_demos

    cfg = build_config(preset, config, set_ or [])
    specs = _scenes(family, split, n, seed, check)
    backend = RoundBackend(cfg)
    env = backend.make_env()
    try:
        report = collect_demos(env, specs, lambda s: backend.expert(s, env), out,
                               potential_fn=lambda s, states: np.asarray(backend.phis(env, s, states), np.float32),
                               wordings_fn=backend.wordings, goal_fn=backend.goal_labels,
                               append=append, keep_failures=keep_failures, progress=True)
    finally:
        env.close()
    console.print(
        f"wrote {report.written} episodes ({report.steps} steps) to {out}; expert solved "
        f"{report.succeeded}/{report.attempted} scenes", highlight=False,
    )


@train_app.command("sft")
@one_line_errors
def train_sft_command(
    demos: Annotated[list[Path], typer.Option("--demos", help="demo dataset directory (repeatable)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="checkpoint file to write")],
    steps: Annotated[Optional[int], typer.Option("--steps", min=1, help="training steps (default policy.train_steps)")] = None,
    metrics: Annotated[Optional[Path], typer.Option("--metrics", help="JSONL metrics file (default: next to the checkpoint)")] = None,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Behaviour cloning of the chunk policy on demonstration datasets (the `sft` setting)."""
    from coda.config import build_config
    from coda.policy.train import train_sft

    cfg = build_config(preset, config, set_ or [])
    metrics = metrics or out.with_suffix(".metrics.jsonl")
    _, result = train_sft(demos, cfg.policy, out, steps=steps, metrics_path=metrics, progress=True)
    console.print(
        f"trained {result.steps} steps in {result.wall_s:.0f} s ({result.samples_per_s:.0f} samples/s); "
        f"final bc loss {result.metrics.get('bc', float('nan')):.4f}; checkpoint {out}; metrics {metrics}",
        highlight=False,
    )


@one_line_errors
def eval_command(
    checkpoint: Annotated[Optional[Path], typer.Option("--checkpoint", help="policy checkpoint file")] = None,
    family: Annotated[Optional[str], typer.Option("--family", help="a family of the backend: pick_place | stack | push | drawer (tabletop), a base suite (libero)")] = None,
    split: SplitOpt = "sft",
    n: Annotated[int, typer.Option("--n", min=1, help="number of scenes")] = 50,
    seed: Annotated[int, typer.Option("--seed", min=0, help="split seed (evaluation: 1)")] = 1,
    workers: Annotated[int, typer.Option("--workers", min=1, help="rollout processes")] = 1,
    value_guided: Annotated[Optional[int], typer.Option("--value-guided-samples", min=0, help="candidates for value-guided selection")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="also write the result as JSON here")] = None,
    backend: Annotated[str, typer.Option("--backend", help="simulator backend (sim.backend): tabletop, libero, or one a package declares")] = "tabletop",
    suite: Annotated[Optional[str], typer.Option("--suite", help="LIBERO's official protocol on this suite, e.g. libero_spatial_swap (libero)")] = None,
    tasks: Annotated[Optional[list[int]], typer.Option("--task", help="LIBERO task id (repeatable; default all)")] = None,
    n_init: Annotated[int, typer.Option("--n-init", min=1, max=50, help="official initial states per task (libero)")] = 50,
    expert: Annotated[bool, typer.Option("--expert", help="evaluate the scripted expert instead of a checkpoint (libero)")] = False,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Success rate of a checkpoint on FAMILY/SPLIT of any simulator backend (the scenes its contract builds
    for that evaluation split, rolled out in its env acting in targets), or on a LIBERO suite under LIBERO's
    official protocol (`--suite`: per task and mean), with Wilson 95% intervals."""
    from coda.config import build_config
    from coda.sim.backends import sim_backend

    sim = sim_backend(backend)  # an unknown name is the registry's error, naming the known ones
    official = suite is not None or expert
    if official and backend != "libero":
        raise CodaError(f"--suite and --expert run LIBERO's official protocol: use them with --backend libero, "
                        f"not {backend!r}")
    if checkpoint is None and not expert:
        raise CodaError("--checkpoint is required" + (" (or --expert)" if backend == "libero" else ""))
    if checkpoint is not None:
        from coda.policy.checkpoint import read_checkpoint

        read_checkpoint(checkpoint)  # fail fast, with the checkpoint's own error, before building scenes
    if official:
        if suite is None:
            raise CodaError("--suite is required with --expert (e.g. libero_spatial_swap)")
        _eval_libero(checkpoint, suite, tasks, n_init, build_config(preset, config, set_ or []), json_out,
                     value_guided)
        return
    if family is None:
        raise CodaError(f"--family is required: a family of backend {backend!r}"
                        + (" (or --suite for LIBERO's official protocol)" if backend == "libero" else ""))
    if split not in sim.eval_splits:
        raise CodaError(f"--split {split!r} is not an evaluation split of backend {backend!r}: {list(sim.eval_splits)}")
    assert checkpoint is not None
    from coda.engine.backend import backend_for
    from coda.engine.rollout import evaluate_checkpoint
    from coda.policy.stats import success_summary

    cfg = build_config(preset, config, set_ or [], data={"sim": {"backend": backend}, "scene": {"families": [family]},
                                                        "runtime": {"workers": workers}})
    round_backend = backend_for(cfg)
    try:  # the engine's evaluation scenes: built, and checked across `workers` processes
        specs, rejected = round_backend.build_split(family, split, split, n, seed)
    finally:
        round_backend.close()
    if rejected:
        err_console.print(f"warning: only {len(specs)} of {n} scenes passed the validity check: "
                          f"{sorted({r for _, r in rejected})[:3]}")
    overrides = {"value_guided_samples": value_guided} if value_guided is not None else None
    rollouts = evaluate_checkpoint(checkpoint, specs, cfg.sim, workers=workers, batch=cfg.runtime.rollout_batch,
                                   record_states=False, overrides=overrides)
    summary = success_summary([r.success for r in rollouts])
    table = Table(title=f"{checkpoint} on {family}/{split} (seed {seed})")
    for col in ("n", "success", "95% CI"):
        table.add_column(col)
    lo, hi = summary["ci95"]  # type: ignore[misc]
    table.add_row(str(summary["n"]), f"{summary['success']:.3f}", f"[{lo:.3f}, {hi:.3f}]")
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({family: {split: summary}}, indent=2))


def _eval_libero(checkpoint: Path | None, suite: str, tasks: list[int] | None, n_init: int, cfg: Any,
                 json_out: Path | None, value_guided: int | None) -> None:
    """`coda eval --backend libero`: the official protocol (coda.engine.libero_eval) in this process."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from coda.engine.libero_eval import ExpertPolicy, TargetPolicyAdapter, evaluate_suite
    from coda.policy.stats import wilson_interval
    from coda.sim.libero.env import LiberoEnv

    if checkpoint is None:
        policy_for: Any = ExpertPolicy
        who = "scripted expert"
    else:
        from coda.policy.checkpoint import load_policy

        overrides = {"value_guided_samples": value_guided} if value_guided is not None else None
        policy = load_policy(checkpoint, overrides=overrides)
        policy_for = lambda env: TargetPolicyAdapter(policy, env=env)  # noqa: E731
        who = str(checkpoint)
    env = LiberoEnv(config=cfg.sim.model_copy(update={"backend": "libero"}))
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                      transient=True) as bar:
            from coda.sim.libero import suites as S

            n_tasks = len(tasks) if tasks else len(S.list_tasks(suite))
            job = bar.add_task(f"{suite} (official protocol)", total=n_tasks * n_init)
            result = evaluate_suite(env, policy_for, suite, tasks, n_init, progress=lambda _: bar.advance(job))
    finally:
        env.close()
    table = Table(title=f"{who} on {suite}: official initial states, BDDL instructions")
    for col in ("task", "instruction", "n", "success", "95% CI"):
        table.add_column(col)
    for t in result.tasks:
        lo, hi = wilson_interval(int(sum(t.successes)), t.n)
        table.add_row(str(t.task_id), t.instruction, str(t.n), f"{t.success:.3f}", f"[{lo:.3f}, {hi:.3f}]")
    lo, hi = result.ci95
    table.add_row("mean", "", str(sum(t.n for t in result.tasks)), f"{result.mean_success:.3f}", f"[{lo:.3f}, {hi:.3f}]")
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({**result.as_dict(), "policy": who}, indent=2))


__all__ = ["demos_app", "train_app", "eval_command"]
