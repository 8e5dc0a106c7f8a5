"""Policy rollouts: one episode of a policy in a scene, and batches of them across worker processes.

A rollout keeps what the later phases need: the outcome, the privileged state trace (for the critic's
predicates and the verifier), the executed actions, and a few keyframes (for a vision-language critic and the
report). Workers load the policy from its checkpoint once per process, so only paths and specs cross process
boundaries.
"""

from __future__ import annotations

import hashlib
import inspect
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda.scene.spec import ScenarioSpec
from coda.sim.config import SimConfig


@dataclass
class Rollout:
    """One episode of a policy in a scene."""

    spec: ScenarioSpec
    success: bool
    episode_return: float
    length: int  # control steps taken
    states: list[Any] = field(default_factory=list)  # TabletopState before each step, then the final one
    actions: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), np.float32))  # (T, 5)
    keyframes: dict[int, np.ndarray] = field(default_factory=dict)  # step -> (S, S, 3) uint8, front camera
    error: str | None = None  # simulator error that ended the episode early, if any


def keyframe_steps(length: int, n: int) -> list[int]:
    """`n` evenly spaced step indices in [0, length], always including the first and the last."""
    if n <= 0:
        return []
    if n == 1 or length == 0:
        return [length]
    return sorted({int(round(i * length / (n - 1))) for i in range(n)})


def rollout_policy(
    env: Any,
    policy: Any,
    spec: ScenarioSpec,
    *,
    max_steps: int | None = None,
    keyframes: int = 0,
    render_size: int = 128,
    record_states: bool = True,
) -> Rollout:
    """Run `policy` (select_action/reset) in `spec` until success or the time limit.

    Args:
        env: a TabletopEnv.
        policy: anything with `reset()` and `select_action(obs) -> (5,)`.
        spec: the scene.
        max_steps: step limit (default: the env's).
        keyframes: number of front-camera frames kept, evenly spaced over the episode (0 = none).
        render_size: keyframe size in pixels.
        record_states: keep the privileged state trace.
    Returns:
        A Rollout.
    """
    obs, info = env.reset_to(spec)
    # after the reset: a backend's horizon can depend on the scene (LIBERO: the suite's)
    limit = int(max_steps if max_steps is not None else (getattr(env, "max_steps", None) or env.config.max_steps))
    reset_for_episode(policy, spec)
    states = [env.state()] if (record_states or keyframes) else []
    snapshots = [env.get_state()] if keyframes else []
    actions: list[np.ndarray] = []
    ret, steps, success, error = 0.0, 0, bool(info["success"]), None
    while not success and steps < limit:
        a = np.asarray(policy.select_action(obs), dtype=np.float32)
        obs, r, terminated, truncated, info = env.step(a)
        actions.append(a)
        ret += float(r)
        steps += 1
        success = bool(info["success"])
        if record_states or keyframes:
            states.append(env.state())
        if keyframes:
            snapshots.append(env.get_state())
        if info.get("sim_error"):
            error = str(info["sim_error"])
            break
        if terminated or truncated:
            break
    frames: dict[int, np.ndarray] = {}
    if keyframes:
        # Rendering only the chosen steps afterwards, from snapshots, keeps the loop free of GL work.
        for t in keyframe_steps(steps, keyframes):
            env.set_state(snapshots[t])
            frames[t] = env.render("front", render_size)
    return Rollout(
        spec=spec, success=success, episode_return=ret, length=steps,
        states=states if record_states else [],
        actions=np.asarray(actions, np.float32).reshape(-1, 5), keyframes=frames, error=error,
    )


def reset_for_episode(policy: Any, spec: Any) -> None:
    """Start an episode in `spec`: a policy whose `reset` takes a seed is reseeded with `episode_seed(spec)`,
    so sampled chunks depend on the scene, not on the worker or the order of episodes."""
    if "seed" in inspect.signature(policy.reset).parameters:
        policy.reset(seed=episode_seed(spec))
    else:
        policy.reset()


def episode_seed(spec: ScenarioSpec) -> int:
    """A policy's sampling seed for an episode in `spec`: a hash of the scene's id, the same in any process."""
    return int.from_bytes(hashlib.sha256(str(spec.spec_id).encode()).digest()[:4], "little")


# ---- process pool -------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init_worker(checkpoint: str, sim_cfg: dict[str, Any], overrides: dict[str, Any] | None) -> None:
    import torch

    # Two processes on two cores: each keeps to one thread so they do not fight.
    torch.set_num_threads(1)
    from coda.engine.backend import round_env
    from coda.policy.checkpoint import load_policy

    _WORKER["policy"] = load_policy(checkpoint, overrides=overrides)
    _WORKER["policy"].eval()
    _WORKER["env"] = round_env(SimConfig.model_validate(sim_cfg))


def _run_one(args: tuple[ScenarioSpec, int, int, bool]) -> Rollout:
    spec, keyframes, size, record_states = args
    import torch

    with torch.no_grad():
        return rollout_policy(_WORKER["env"], _WORKER["policy"], spec, keyframes=keyframes,
                              render_size=size, record_states=record_states)


def evaluate_checkpoint(
    checkpoint: str | Path,
    specs: Sequence[ScenarioSpec],
    sim_cfg: SimConfig,
    *,
    workers: int = 1,
    keyframes: int = 0,
    record_states: bool = True,
    overrides: dict[str, Any] | None = None,
    on_done: Callable[[int, Rollout], None] | None = None,
) -> list[Rollout]:
    """Roll the checkpoint's policy out once in each scene; results in the order of `specs`.

    Args:
        checkpoint: policy checkpoint file.
        specs: scenes.
        sim_cfg: simulator settings (horizon, rendering size).
        workers: processes (1 = in this process).
        keyframes: front-camera frames kept per episode.
        record_states: keep privileged state traces (needed by the critic and verifier).
        overrides: inference-time policy config overrides (e.g. value_guided_samples).
        on_done: called with (index, rollout) as each finishes, for progress bars.
    Returns:
        One Rollout per spec.
    """
    jobs = [(s, keyframes, sim_cfg.render_size, record_states) for s in specs]
    out: list[Rollout | None] = [None] * len(jobs)
    if not jobs:
        return []
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(str(checkpoint), sim_cfg.model_dump(), overrides)
        try:
            for i, job in enumerate(jobs):
                out[i] = _run_one(job)
                if on_done:
                    on_done(i, out[i])  # type: ignore[arg-type]
        finally:
            _WORKER.pop("env").close()
            _WORKER.clear()
        return out  # type: ignore[return-value]
    ctx = mp.get_context("forkserver" if os.name == "posix" else "spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(str(checkpoint), sim_cfg.model_dump(), overrides)) as pool:
        for i, r in enumerate(pool.map(_run_one, jobs, chunksize=1)):
            out[i] = r
            if on_done:
                on_done(i, r)
    return out  # type: ignore[return-value]
