"""Simulator speed of the tabletop backend: env vs raw MuJoCo, expert episodes/s, 1 vs 2 processes.

- env vs raw: the same compiled model and the same control sequence (recorded from expert episodes) are
  stepped through `TabletopEnv.step` (observation, state, success check included) and through bare
  `mj_step(m, d, nstep=substeps)`, interleaved in short blocks. Steps/s are per second of this process's
  CPU time, so other work on a shared machine does not skew them; the wall-clock figures are kept beside
  them (`*_wall`). `env_vs_raw_ratio` = env control steps/s / raw control steps/s (goal >= 0.85).
- expert episodes/s per family: closed-loop scripted-expert episodes (reset + rollout) on fresh scenes,
  with their success rate.
- two-process speedup: the same batch of expert episodes in one process vs a pool of two.

Writes `bench/results/sim_speed.json`. Usage:
    python bench/sim_speed.py          # full measurement (a few minutes)
    python bench/sim_speed.py --fast   # under a minute
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from _common import machine, scene_source, write_result  # noqa: E402
from coda.scene.spec import FAMILIES, ScenarioSpec  # noqa: E402
from coda.sim.tabletop.builder import finger_target  # noqa: E402
from coda.sim.tabletop.env import TabletopEnv  # noqa: E402
from coda.sim.tabletop.experts import rollout_expert  # noqa: E402

import mujoco  # noqa: E402


def scenes(family: str, n: int, seed: int) -> list[ScenarioSpec]:
    """`n` scenes of `family` from the benchmark's scene source, seeded."""
    sample, _ = scene_source()
    rng = np.random.default_rng(seed)
    return [sample(family, rng) for _ in range(n)]


def control_sequence(spec: ScenarioSpec, steps: int) -> np.ndarray:
    """Actions (steps, 5) an expert sends in `spec`, episodes repeated until `steps` are collected."""
    env = TabletopEnv(spec)
    acts: list[np.ndarray] = []
    while len(acts) < steps:
        ep = rollout_expert(env, spec)
        acts.extend(ep.actions)
    env.close()
    return np.stack(acts[:steps]).astype(np.float32)


def env_vs_raw(specs: list[ScenarioSpec], steps: int, block: int, progress: Progress) -> dict[str, float]:
    """Control steps/s of the env and of raw mj_step on the same models and controls, interleaved in blocks
    of `block` steps, round-robin over `specs`, until `steps` steps have run each way."""
    wall = {"env": 0.0, "raw": 0.0}
    cpu = {"env": 0.0, "raw": 0.0}
    done = 0
    task = progress.add_task("env vs raw mj_step", total=steps)
    runs = []
    for spec in specs:
        acts = control_sequence(spec, block)
        env = TabletopEnv(spec)
        env.reset()
        # the env's action-to-control mapping, applied once up front for the raw loop
        fingers = np.array([finger_target(float(g)) for g in acts[:, 4]])
        ctrls = np.column_stack([acts[:, :4], fingers, fingers])
        runs.append((env, acts, ctrls, mujoco.MjData(env.model)))
    k = 0
    while done < steps:
        env, acts, ctrls, raw = runs[k % len(runs)]
        k += 1
        m, idx = env.model, env.scene.index
        n_sub = idx.substeps
        env.reset()
        w0, c0 = time.perf_counter(), time.process_time()
        for a in acts:
            env.step(a)
        wall["env"] += time.perf_counter() - w0
        cpu["env"] += time.process_time() - c0
        mujoco.mj_resetData(m, raw)
        raw.qpos[:] = idx.init_qpos
        w0, c0 = time.perf_counter(), time.process_time()
        for c in ctrls:
            raw.ctrl[:] = c
            mujoco.mj_step(m, raw, nstep=n_sub)
        wall["raw"] += time.perf_counter() - w0
        cpu["raw"] += time.process_time() - c0
        done += len(acts)
        progress.advance(task, len(acts))
    for env, *_ in runs:
        env.close()
    return {
        "env_ctrl_steps_per_s": done / cpu["env"],
        "raw_ctrl_steps_per_s": done / cpu["raw"],
        "env_vs_raw_ratio": cpu["raw"] / cpu["env"],
        "env_vs_raw_ratio_wall": wall["raw"] / wall["env"],
        "env_ctrl_steps_per_s_wall": done / wall["env"],
        "raw_ctrl_steps_per_s_wall": done / wall["raw"],
        "raw_physics_steps_per_s": done * n_sub / cpu["raw"],
        "steps_measured": done,
    }


def run_episodes(specs: list[ScenarioSpec]) -> tuple[int, int, float, float]:
    """Expert episodes on `specs` in this process: (successes, control steps, wall seconds, CPU seconds)."""
    env = TabletopEnv()
    ok = steps = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for spec in specs:
        ep = rollout_expert(env, spec, record=False)
        ok += ep.success
        steps += ep.length
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return ok, steps, dt, dc


def _warm(_: int) -> int:
    return 0


def two_process_speedup(specs: list[ScenarioSpec]) -> dict[str, float]:
    """Wall time of the same episodes in one process and split over a pool of two (started beforehand).

    The speedup is wall-clock throughput, so it depends on what else the machine runs: the workers' CPU
    seconds are recorded beside it (equal CPU and halved wall time would be perfect scaling)."""
    _, _, t1, c1 = run_episodes(specs)
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(_warm, range(2))  # start both workers (imports) before timing
        t0 = time.perf_counter()
        parts = pool.map(run_episodes, [specs[0::2], specs[1::2]])
        t2 = time.perf_counter() - t0
    return {"one_process_s": t1, "two_process_s": t2, "two_process_speedup": t1 / t2, "episodes": len(specs),
            "one_process_cpu_s": c1, "two_process_cpu_s": [p[3] for p in parts]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="small sample sizes: finishes in under a minute")
    ap.add_argument("--seed", type=int, default=0, help="seed of the scene stream")
    args = ap.parse_args(argv)
    n_steps, n_eps, n_par = (600, 4, 12) if args.fast else (6000, 40, 40)
    console = Console()
    _, source = scene_source()
    result: dict[str, Any] = {"scene_source": source, "fast": args.fast, "seed": args.seed, "machine": machine(),
                              "load_average_start": os.getloadavg()}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        speed_scenes = [scenes(fam, 1, args.seed)[0] for fam in FAMILIES]  # one scene per family, pooled
        result.update(env_vs_raw(speed_scenes, n_steps, 100, progress))
        result["speed_scenes"] = {s.family: s.spec_id for s in speed_scenes}
        eps: dict[str, float] = {}
        success: dict[str, float] = {}
        task = progress.add_task("expert episodes", total=n_eps * len(FAMILIES))
        for fam in FAMILIES:
            batch = scenes(fam, n_eps, args.seed + 1)
            ok, _, dt, _ = run_episodes(batch)
            eps[fam], success[fam] = n_eps / dt, ok / n_eps
            progress.advance(task, n_eps)
        result["expert_episodes_per_s"] = eps
        result["expert_success"] = success
        result["expert_episodes_per_family"] = n_eps
        task = progress.add_task("1 vs 2 processes", total=1)
        mixed = [s for fam in FAMILIES for s in scenes(fam, n_par // len(FAMILIES), args.seed + 2)]
        par = two_process_speedup(mixed)
        progress.advance(task)
    result["two_process_speedup"] = par.pop("two_process_speedup")
    result["load_average_end"] = os.getloadavg()
    result["two_process"] = par
    out = write_result("sim_speed", result)
    table = Table(title=f"tabletop sim speed ({out})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("env ctrl steps/s", f"{result['env_ctrl_steps_per_s']:.0f}")
    table.add_row("raw ctrl steps/s", f"{result['raw_ctrl_steps_per_s']:.0f}")
    table.add_row("env / raw", f"{result['env_vs_raw_ratio']:.3f}")
    for fam in FAMILIES:
        table.add_row(f"{fam} expert episodes/s (success)", f"{eps[fam]:.2f} ({success[fam]:.2f})")
    table.add_row("two-process speedup", f"{result['two_process_speedup']:.2f}x")
    console.print(table)
    return result


if __name__ == "__main__":
    main()
