"""Policy-in-the-loop speed: batched rollouts against the bare env, per core and with two workers.

- bare env: the actions the policy sent, replayed through `TabletopEnv.step` in the same scenes (observation,
  state and success check included: the simulator's side of a rollout, without the policy).
- policy rollouts at batch 1, 2, 4, 8 and 16 (`coda.engine.rollout.rollout_batch`): that many episodes
  run together in one process, the policy called for all that need a chunk at once, each episode then run
  through its chunk. Steps/s are per second of this process's CPU time, with the scenes' words already
  embedded (once per scene and process, recorded apart as `embed_words_cpu_s_per_scene`). Every batch size
  must give the same episodes as batch 1 (actions compared bit for bit): `identical_episodes`. Each batch size's rollouts are followed by a bare-env
  replay, over `--passes` passes; `ratio_to_env` is the median over passes of the rollouts' speed over the
  replay's right after them (a shared machine's speed drifts by more than the gaps measured here: the pairs
  see the same drift), `ratio_to_env_pooled` all rollouts' CPU time over all replays'.
- one family at a time: each family's scenes alone at the chosen batch (`ratio_to_env_one_family`), as the
  engine runs them (a policy is one family's), each family's rollouts followed by their replay.
- two workers: the scenes twice over at the chosen batch in one process and on two worker processes that take
  scenes from one shared queue as their envs free (`executor.map_queue`, what `evaluate_checkpoint` runs), all
  with their policy, envs and the scenes' words loaded before the clock starts (wall time from the first
  job's start to the last one's end; each worker's CPU seconds and scenes beside it).
- end to end: `evaluate_checkpoint` (process start, policy load and rollouts) with one and two workers, and
  with two workers on the local pool vs on Ray actors (`ray_vs_local`: Ray's wall time / the pool's).

The policy is the default architecture trained briefly on a few expert demos (its speed does not depend
on how well it is trained; an untrained policy runs every episode to the horizon, which is what a speed
measurement wants). Writes `bench/results/rollout_speed.json`. Usage:
    python bench/rollout_speed.py           # 12 scenes per family (a few minutes)
    python bench/rollout_speed.py --fast    # 3 scenes per family
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
from rich.table import Table  # noqa: E402

from _common import machine, write_result  # noqa: E402
from coda.scene.spec import FAMILIES, ScenarioSpec  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32)


def make_checkpoint(work: Path, steps: int) -> Path:
    """The default policy trained `steps` steps on expert demos of 4 training scenes per family (reused
    when `work` already holds it)."""
    import torch

    from coda.config import build_config
    from coda.engine.backend import RoundBackend
    from coda.policy.train import train_sft
    from coda.scene.splits import build_split
    from coda.sim.tabletop.validity import sim_check

    ckpt = work / "policy.pt"
    if ckpt.exists():
        return ckpt
    cfg = build_config(None, overrides=[f"policy.train_steps={steps}", "policy.torch_threads=1"])
    torch.set_num_threads(1)
    dirs = []
    for fam in FAMILIES:
        with RoundBackend(cfg) as backend:
            backend.collect_demos(build_split(fam, "sft", 4, seed=0, check=sim_check).valid, work / f"demos_{fam}")
        dirs.append(work / f"demos_{fam}")
    train_sft(dirs, cfg.policy, ckpt)
    return ckpt


def eval_scenes(per_family: int, families: tuple[str, ...] = FAMILIES) -> list[ScenarioSpec]:
    """`per_family` valid evaluation scenes of each family's sft split (seed 1), families interleaved."""
    from coda.scene.splits import build_split
    from coda.sim.tabletop.validity import sim_check

    by_fam = [build_split(fam, "sft", per_family, seed=1, check=sim_check).valid for fam in families]
    return [s for group in zip(*by_fam) for s in group]


# ---- one process --------------------------------------------------------------------------------

_W: dict[str, Any] = {}


def _load(ckpt: str, batch: int) -> None:
    import torch

    torch.set_num_threads(1)
    from coda.policy.checkpoint import load_policy
    from coda.sim.config import SimConfig
    from coda.sim.tabletop.env import TabletopEnv

    _W["policy"] = load_policy(ckpt)
    _W["policy"].eval()
    _W["envs"] = [TabletopEnv(config=SimConfig()) for _ in range(max(BATCHES + (batch,)))]


def _rollouts(specs: list[ScenarioSpec], batch: int, max_steps: int | None = None) -> tuple[list[Any], float, float]:
    """(rollouts, CPU s, wall s) of `specs` at `batch` in this process."""
    import torch

    from coda.engine.rollout import rollout_batch

    w0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = rollout_batch(_W["envs"][:batch], _W["policy"], specs, record_states=False, max_steps=max_steps)
    return out, time.process_time() - c0, time.perf_counter() - w0


def one_family(per_family: int, batch: int, passes: int) -> dict[str, Any]:
    """Each family's scenes alone at `batch` (as the engine runs them: a policy is one family's), each
    family's rollouts followed by the bare env replaying their actions; per pass, all families' rollout CPU
    time over their replays'. Median over passes, each pass, and whether every pass gave the same episodes."""
    by_fam = {fam: eval_scenes(per_family, (fam,)) for fam in FAMILIES}
    _embed([s for group in by_fam.values() for s in group])
    per_pass, ref, identical, steps = [], {}, True, 0
    for _ in range(passes):
        roll_cpu = replay_cpu = 0.0
        for fam, specs in by_fam.items():
            rollouts, c, _ = _rollouts(specs, batch)
            if fam not in ref:
                ref[fam] = rollouts
                steps += sum(r.length for r in rollouts)
            identical &= all(np.array_equal(a.actions, r.actions) for a, r in zip(ref[fam], rollouts))
            roll_cpu += c
            replay_cpu += _replay(specs, [r.actions for r in ref[fam]])
        per_pass.append(replay_cpu / roll_cpu)
    return {"ratio_to_env": float(np.median(per_pass)), "per_pass": per_pass, "scenes_per_family": per_family,
            "control_steps": steps, "identical_episodes": bool(identical)}


def _embed(specs: list[ScenarioSpec]) -> float:
    """CPU seconds to embed the words of `specs` (one step in each scene): a scene's descriptions and
    instruction are embedded once per process and cached, so the timed rollouts leave this out."""
    return _rollouts(specs, max(BATCHES), max_steps=1)[1]


def _replay(specs: list[ScenarioSpec], actions: list[np.ndarray]) -> float:
    """CPU seconds to replay `actions` through the env in `specs`."""
    env = _W["envs"][0]
    c0 = time.process_time()
    for spec, acts in zip(specs, actions):
        env.reset_to(spec)
        for a in acts:
            env.step(a)
    return time.process_time() - c0


def _init(ckpt: str, batch: int, warm: list[ScenarioSpec], barrier: Any = None) -> None:
    """A worker: policy and envs loaded, the scenes' words embedded, then (with several workers) wait for
    all of them, so the clock of the first job is every worker's start."""
    _load(ckpt, batch)
    _embed(warm)
    if barrier is not None:
        barrier.wait()


def _stream_timed(scenes: Any, batch: int) -> list[tuple[int, tuple[int, int, float, float, float]]]:
    """One job of the shared queue in this worker: (index, (length, pid, start, end, CPU s of the job))."""
    import torch

    from coda.engine.rollout import stream_rollouts

    envs = _W["envs"]
    t0, c0 = time.monotonic(), time.process_time()  # CLOCK_MONOTONIC: one clock for all processes
    with torch.no_grad():
        done = list(stream_rollouts(envs.__getitem__, batch, _W["policy"], scenes, record_states=False))
    t1, cpu = time.monotonic(), time.process_time() - c0
    return [(i, (r.length, os.getpid(), t0, t1, cpu)) for i, r in done]


def two_workers(ckpt: str, specs: list[ScenarioSpec], batch: int) -> dict[str, Any]:
    """Wall time of `specs` at `batch` in one worker and on two taking scenes from one shared queue (the
    executors' `map_queue`, as `evaluate_checkpoint` runs), policies, envs and words loaded first: from the
    first job's start to the last one's end."""
    import functools

    from coda.engine.rollout import queue_quota
    from coda.runtime.executor import LocalExecutor

    out: dict[str, Any] = {}
    for n in (1, 2):
        barrier = mp.get_context("forkserver").Barrier(n) if n > 1 else None
        got = list(LocalExecutor(n).map_queue(functools.partial(_stream_timed, batch=batch), specs,
                                              quota=queue_quota(batch), init=_init,
                                              initargs=(ckpt, batch, specs, barrier)))
        jobs = {(pid, t0): (t1, cpu) for _, (_, pid, t0, t1, cpu) in got}
        cpu_by_pid: dict[int, float] = {}
        for (pid, _), (_, cpu) in jobs.items():
            cpu_by_pid[pid] = cpu_by_pid.get(pid, 0.0) + cpu
        out[f"workers_{n}"] = {"wall_s": max(t1 for t1, _ in jobs.values()) - min(t0 for _, t0 in jobs),
                               "steps": sum(x[0] for _, x in got), "cpu_s": sorted(cpu_by_pid.values()),
                               "scenes": sorted(sum(1 for _, x in got if x[1] == pid) for pid in cpu_by_pid)}
    out["speedup"] = out["workers_1"]["wall_s"] / out["workers_2"]["wall_s"]
    return out


def end_to_end(ckpt: Path, specs: list[ScenarioSpec], batch: int) -> dict[str, float]:
    """Wall seconds of `evaluate_checkpoint` over `specs` with one and two workers (process start and
    policy load included)."""
    from coda.engine.rollout import evaluate_checkpoint
    from coda.sim.config import SimConfig

    out = {}
    for w in (1, 2):
        t0 = time.perf_counter()
        evaluate_checkpoint(ckpt, specs, SimConfig(), workers=w, batch=batch, record_states=False)
        out[f"workers_{w}_s"] = time.perf_counter() - t0
    return out


def ray_vs_local(ckpt: Path, specs: list[ScenarioSpec], batch: int) -> dict[str, float] | None:
    """Wall seconds of `evaluate_checkpoint` over `specs` with two workers on the local pool and on Ray
    actors (a local Ray started beforehand, outside the clock; process start and policy load inside it), and
    their ratio. None when Ray is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return None
    from coda.engine.rollout import evaluate_checkpoint
    from coda.runtime.executor import LocalExecutor, RayExecutor
    from coda.sim.config import SimConfig

    out: dict[str, float] = {}
    ray_ex = RayExecutor(2)
    try:
        for name, ex in (("local", LocalExecutor(2)), ("ray", ray_ex)):
            t0 = time.perf_counter()
            evaluate_checkpoint(ckpt, specs, SimConfig(), batch=batch, record_states=False, executor=ex)
            out[f"{name}_s"] = time.perf_counter() - t0
    finally:
        ray_ex.close()
    out["ray_over_local"] = out["ray_s"] / out["local_s"]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="3 scenes per family instead of 12")
    ap.add_argument("--batch", type=int, default=16, help="the batch the two-worker and end-to-end runs use")
    ap.add_argument("--work", type=Path, default=Path("runs/rollout_speed"), help="folder for the policy")
    ap.add_argument("--train-steps", type=int, default=50, help="training steps of the measured policy")
    ap.add_argument("--passes", type=int, default=3, help="passes over the batch sizes, each followed by a replay")
    args = ap.parse_args(argv)
    console = Console()
    args.work.mkdir(parents=True, exist_ok=True)
    console.print("policy: training briefly on expert demos (reused if present)")
    ckpt = make_checkpoint(args.work, args.train_steps)
    specs = eval_scenes(3 if args.fast else 12)
    _load(str(ckpt), args.batch)
    embed_cpu = _embed(specs)
    ref, identical = None, True
    cpu = {b: 0.0 for b in BATCHES}
    pair_ratio: dict[int, list[float]] = {b: [] for b in BATCHES}
    replay_cpu = 0.0
    steps = 0
    for rep in range(args.passes):  # each batch size followed by a bare-env replay: drift hits both alike
        for b in BATCHES:
            rollouts, c, _ = _rollouts(specs, b)
            if ref is None:
                ref = rollouts
                actions = [r.actions for r in rollouts]
                steps = sum(r.length for r in rollouts)
            else:
                identical &= all(np.array_equal(a.actions, r.actions) and a.success == r.success
                                 for a, r in zip(ref, rollouts))
            cpu[b] += c
            r = _replay(specs, actions)
            replay_cpu += r
            pair_ratio[b].append(r / c)
            console.print(f"pass {rep + 1}, batch {b:2d}: {steps / c:6.0f} policy steps per CPU second, "
                          f"{r / c:.2f}x the replay after it")
    steps_s = {f"batch_{b}": args.passes * steps / cpu[b] for b in BATCHES}
    total = steps
    env_steps = args.passes * len(BATCHES) * total / replay_cpu
    paired = {f"batch_{b}": float(np.median(v)) for b, v in pair_ratio.items()}
    console.print(f"bare env: {env_steps:7.0f} steps per CPU second")
    console.print(f"one family at a time, batch {args.batch} ...")
    alone = one_family(8 if args.fast else 32, args.batch, args.passes)
    console.print(f"one family at a time: {alone['ratio_to_env']:.2f}x the replays after them "
                  f"(passes {', '.join(f'{v:.2f}' for v in alone['per_pass'])})")
    console.print(f"two workers at batch {args.batch} ...")
    par = two_workers(str(ckpt), specs * 2, args.batch)  # twice over: each worker fills whole batches for longer
    e2e = end_to_end(ckpt, specs, args.batch)
    console.print("Ray vs the local pool ...")
    on_ray = ray_vs_local(ckpt, specs, args.batch)
    chosen = steps_s[f"batch_{args.batch}"]
    result = {
        "env_steps_per_s": env_steps,
        "policy_steps_per_s": {"batch_1": steps_s["batch_1"], "batch_N": chosen, **steps_s},
        "batch": args.batch,
        "ratio_to_env": paired[f"batch_{args.batch}"],
        "ratio_to_env_batch_1": paired["batch_1"],
        "ratio_to_env_pooled": chosen / env_steps,  # all passes' policy CPU over all replays' CPU
        "ratio_to_env_per_pass": {f"batch_{b}": v for b, v in pair_ratio.items()},
        "ratio_to_env_one_family": alone["ratio_to_env"],  # each family's scenes alone, as the engine runs them
        "one_family": alone,
        "two_workers_speedup": par["speedup"],
        "two_workers": par,
        "end_to_end_s": e2e,
        "ray_vs_local": on_ray["ray_over_local"] if on_ray else None,  # Ray's wall time / the local pool's
        "ray_vs_local_s": on_ray,
        "identical_episodes": bool(identical),
        "embed_words_cpu_s_per_scene": embed_cpu / len(specs),
        "episodes": len(specs),
        "control_steps": total,
        "fast": args.fast,
        "machine": machine(),
        "load_average_end": os.getloadavg(),
    }
    out = write_result("rollout_speed" + ("_fast" if args.fast else ""), result)
    table = Table(title=f"policy-in-the-loop speed ({out})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("bare env steps / CPU s", f"{env_steps:.0f}")
    for b in BATCHES:
        table.add_row(f"policy steps / CPU s, batch {b}",
                      f"{steps_s[f'batch_{b}']:.0f} ({paired[f'batch_{b}']:.2f}x env, median of passes)")
    table.add_row(f"one family at a time, batch {args.batch}", f"{alone['ratio_to_env']:.2f}x env, median of passes")
    table.add_row(f"two workers vs one (batch {args.batch})", f"{par['speedup']:.2f}x")
    if on_ray:
        table.add_row("Ray / local pool wall time (2 workers)", f"{on_ray['ray_over_local']:.2f}x")
    table.add_row("identical episodes at every batch", str(identical and alone["identical_episodes"]))
    console.print(table)
    return result


if __name__ == "__main__":
    main()
