"""Policy rollouts: one episode of a policy in a scene, and batches of them across worker processes.

A rollout keeps what the later phases need: the outcome, the privileged state trace (for the critic's
predicates and the verifier), the executed actions, and a few keyframes (for a vision-language critic and the
report). Workers load the policy from its checkpoint once per process, so only paths and specs cross process
boundaries.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda.policy.text import text_cache_path, worker_text_cache
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


class _Episode:
    """One episode being run in `env`: reset to `spec` on creation, then one `step` per action until `done`."""

    def __init__(self, env: Any, spec: ScenarioSpec, max_steps: int | None, keyframes: int, render_size: int,
                 record_states: bool) -> None:
        self.env, self.spec, self.keyframes, self.render_size = env, spec, keyframes, render_size
        self.record_states = record_states
        self.obs, info = env.reset_to(spec)
        # after the reset: a backend's horizon can depend on the scene (LIBERO: the suite's)
        self.limit = int(max_steps if max_steps is not None else (getattr(env, "max_steps", None) or env.config.max_steps))
        self.states = [env.state()] if (record_states or keyframes) else []
        self.snapshots = [env.get_state()] if keyframes else []
        self.actions: list[np.ndarray] = []
        self.ret, self.steps, self.success, self.error = 0.0, 0, bool(info["success"]), None
        self.ended = False  # the env ended the episode (terminated, truncated or a simulator error)

    @property
    def done(self) -> bool:
        return self.success or self.ended or self.steps >= self.limit

    def step(self, action: np.ndarray) -> None:
        a = np.asarray(action, dtype=np.float32)
        self.obs, r, terminated, truncated, info = self.env.step(a)
        self.actions.append(a)
        self.ret += float(r)
        self.steps += 1
        self.success = bool(info["success"])
        if self.record_states or self.keyframes:
            self.states.append(self.env.state())
        if self.keyframes:
            self.snapshots.append(self.env.get_state())
        if info.get("sim_error"):
            self.error, self.ended = str(info["sim_error"]), True
        elif terminated or truncated:
            self.ended = True

    def result(self) -> Rollout:
        frames: dict[int, np.ndarray] = {}
        if self.keyframes and not self.success:
            # Rendering only the chosen steps afterwards, from snapshots, keeps the loop free of GL work; a
            # success is never diagnosed nor shown, so it is not rendered (a frame costs more than its episode's
            # policy calls on a CPU renderer).
            for t in keyframe_steps(self.steps, self.keyframes):
                self.env.set_state(self.snapshots[t])
                frames[t] = self.env.render("front", self.render_size)
        return Rollout(
            spec=self.spec, success=self.success, episode_return=self.ret, length=self.steps,
            states=self.states if self.record_states else [],
            actions=np.asarray(self.actions, np.float32).reshape(-1, 5), keyframes=frames, error=self.error,
        )


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
        keyframes: front-camera frames kept, evenly spaced over the episode, if it fails (0 = none).
        render_size: keyframe size in pixels.
        record_states: keep the privileged state trace.
    Returns:
        A Rollout.
    """
    ep = _Episode(env, spec, max_steps, keyframes, render_size, record_states)
    reset_for_episode(policy, spec)
    while not ep.done:
        ep.step(policy.select_action(ep.obs))
    return ep.result()


def batches_rollouts(policy: Any) -> bool:
    """Whether `policy` can run several episodes at once (`chunks_for` and `episode_actions`)."""
    return hasattr(policy, "chunks_for") and hasattr(policy, "episode_actions")


def rollout_batch(
    envs: Sequence[Any],
    policy: Any,
    specs: Sequence[ScenarioSpec],
    *,
    max_steps: int | None = None,
    keyframes: int = 0,
    render_size: int = 128,
    record_states: bool = True,
    on_done: Callable[[int, Rollout], None] | None = None,
) -> list[Rollout]:
    """Roll `policy` out once in each scene, `len(envs)` episodes at a time; results in the order of `specs`.

    Each env runs one episode at a time; the episodes whose action schedule needs a chunk are predicted
    together (`policy.chunks_for`, one forward pass), each with its own sampling stream seeded by
    `episode_seed(spec)`, then each episode runs through its chunk's actions in its env. An episode that ends
    hands its env to the next scene. A policy's rows do not depend on the batch they are computed in, so every
    episode is the one `rollout_policy` gives in the same scene. A policy that cannot batch (`batches_rollouts`) runs its
    episodes one after another in `envs[0]`.

    Args:
        envs: the environments to step (one episode each at a time).
        policy, specs, max_steps, keyframes, render_size, record_states: as for `rollout_policy`.
        on_done: called with (index into `specs`, rollout) as each episode ends.
    """
    out: list[Rollout | None] = [None] * len(specs)
    order = batch_order(specs)
    for i, r in stream_rollouts(envs.__getitem__, len(envs), policy, ((i, specs[i]) for i in order), max_steps=max_steps,
                                keyframes=keyframes, render_size=render_size, record_states=record_states):
        out[i] = r
        if on_done:
            on_done(i, r)
    return out  # type: ignore[return-value]


def batch_order(specs: Sequence[ScenarioSpec]) -> list[int]:
    """The order to run `specs` in: alike scenes (entity count, then family) next to each other. The policy
    runs a batch in blocks of one padded shape each (`ChunkPolicy._blocks`; after an episode's first chunk, of
    one entity count), so a batch of alike scenes is one block where an interleaved one is several; no
    episode depends on the order."""
    def alike(spec: Any) -> tuple[int, str]:  # any backend's scenario: what it has of these
        parts = ("objects", "containers", "drawers", "regions")
        return sum(len(getattr(spec, f, ()) or ()) for f in parts), str(getattr(spec, "family", ""))

    return sorted(range(len(specs)), key=lambda i: alike(specs[i]))


def stream_rollouts(
    env_at: Callable[[int], Any],
    slots: int,
    policy: Any,
    scenes: Iterable[tuple[Any, ScenarioSpec]],
    *,
    max_steps: int | None = None,
    keyframes: int = 0,
    render_size: int = 128,
    record_states: bool = True,
) -> Iterator[tuple[Any, Rollout]]:
    """(key, rollout) for each (key, scene) of `scenes`, as the episodes end: `slots` episodes at a time,
    each slot's env `env_at(slot)` (asked for only when the slot first gets a scene), a scene taken from
    `scenes` whenever a slot frees (so `scenes` may be a shared queue other workers take from too).

    The episodes meet at chunk boundaries: those whose action schedule needs a chunk are predicted together
    (`policy.chunks_for`, one forward pass), each with its own sampling stream seeded by `episode_seed(spec)`,
    then each runs through its chunk's actions in its env before the next env's turn. A policy's rows do not
    depend on the batch they are computed in, so every episode is the one `rollout_policy` gives in the same
    scene. A policy that cannot batch (`batches_rollouts`), or
    one slot, runs the episodes one after another in `env_at(0)`.
    """
    opts = dict(max_steps=max_steps, keyframes=keyframes, render_size=render_size, record_states=record_states)
    if not batches_rollouts(policy) or slots <= 1:
        for key, spec in scenes:
            yield key, rollout_policy(env_at(0), policy, spec, **opts)  # type: ignore[arg-type]
        return
    queue = iter(scenes)
    live: list[tuple[Any, _Episode, Any] | None] = [None] * slots
    ended: list[tuple[Any, Rollout]] = []

    def fill(k: int) -> None:
        live[k] = None
        for key, spec in queue:
            ep = _Episode(env_at(k), spec, max_steps, keyframes, render_size, record_states)
            if ep.done:  # solved at reset
                ended.append((key, ep.result()))
                continue
            live[k] = (key, ep, policy.episode_actions(episode_seed(spec)))
            return

    for k in range(slots):
        fill(k)
        if live[k] is None:  # the queue is empty
            break
    yield from ended
    ended.clear()
    while any(live):
        need = [s for s in live if s is not None and s[2].needs_chunk()]
        if need:
            with torch.inference_mode():  # no autograd bookkeeping at all (a tenth of a policy call)
                chunks = policy.chunks_for([s[1].obs for s in need], [s[2] for s in need])
            for s, chunk in zip(need, chunks):
                s[2].push(chunk)
        # Each episode runs through the actions it holds before the next env's turn: episodes only meet at
        # chunk boundaries, and one env's simulator data stays in the cache for its steps in a row (16 envs
        # stepped one step each in turn cost ~10% more per step than one env's run).
        for k, s in enumerate(live):
            if s is None:
                continue
            key, ep, actions = s
            ep.step(actions.pop())
            while not ep.done and not actions.needs_chunk():
                ep.step(actions.pop())
            if ep.done:
                ended.append((key, ep.result()))
                fill(k)
        yield from ended
        ended.clear()


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


def _init_worker(checkpoint: Any, sim_cfg: dict[str, Any], overrides: dict[str, Any] | None,
                 text_cache: Path | None = None) -> None:
    # Two processes on two cores: each keeps to one thread so they do not fight.
    torch.set_num_threads(1)
    from coda.policy.checkpoint import load_policy
    from coda.runtime.executor import local_file

    worker_text_cache(text_cache)

    _WORKER["policy"] = load_policy(local_file(checkpoint), overrides=overrides)
    _WORKER["policy"].eval()
    _WORKER["sim"] = SimConfig.model_validate(sim_cfg)
    _WORKER["envs"] = []  # made as a batch first needs them


def _close_worker() -> None:
    for env in _WORKER.get("envs", []):
        env.close()
    _WORKER.clear()


def _run_stream(scenes: Iterator[tuple[int, ScenarioSpec]], keyframes: int, size: int, record_states: bool,
                batch: int) -> list[tuple[int, Rollout]]:
    """One job of the shared queue: `batch` episodes at a time in this worker's envs (kept for its later
    jobs), taking scenes as envs free."""
    from coda.engine.backend import round_env

    envs = _WORKER["envs"]

    def env_at(k: int) -> Any:
        while len(envs) <= k:
            envs.append(round_env(_WORKER["sim"]))
        return envs[k]

    with torch.no_grad():
        return list(stream_rollouts(env_at, batch, _WORKER["policy"], scenes, keyframes=keyframes,
                                    render_size=size, record_states=record_states))


def queue_quota(batch: int) -> int:
    """Scenes one job of the shared queue takes at most (4 batches): results come back, and progress shows,
    at least that often per worker, and a job's last episodes run in a shrinking batch once per quota."""
    return 4 * max(1, batch)


def evaluate_checkpoint(
    checkpoint: str | Path,
    specs: Sequence[ScenarioSpec],
    sim_cfg: SimConfig,
    *,
    workers: int = 1,
    batch: int | None = None,
    keyframes: int = 0,
    record_states: bool = True,
    overrides: dict[str, Any] | None = None,
    on_done: Callable[[int, Rollout], None] | None = None,
    executor: Any = None,
) -> list[Rollout]:
    """Roll the checkpoint's policy out once in each scene; results in the order of `specs`.

    Args:
        checkpoint: policy checkpoint file.
        specs: scenes.
        sim_cfg: simulator settings (horizon, rendering size).
        workers: processes (1 = in this process), when no `executor` is given.
        batch: episodes each process runs at a time (`rollout_batch`; default `runtime.rollout_batch`'s
            default); the episodes do not depend on it.
        keyframes: front-camera frames kept per failed episode (successes are not rendered).
        record_states: keep privileged state traces (needed by the critic and verifier).
        overrides: inference-time policy config overrides (e.g. value_guided_samples).
        on_done: called with (index, rollout) as each job's episodes come back, for progress bars.
        executor: where the worker processes run (`coda.runtime.executor`; default local, `workers` of them).
    Returns:
        One Rollout per spec.
    """
    specs = list(specs)
    out: list[Rollout | None] = [None] * len(specs)
    if not specs:
        return []
    if batch is None:
        from coda.runtime.config import RuntimeConfig

        batch = int(RuntimeConfig.model_fields["rollout_batch"].default)
    if executor is None:
        from coda.runtime.executor import LocalExecutor

        executor = LocalExecutor(workers)
    # One shared queue of scenes: a worker whose episodes end early takes more, so none idles at the end.
    fn = functools.partial(_run_stream, keyframes=keyframes, size=sim_cfg.render_size, record_states=record_states,
                           batch=batch)
    order = batch_order(specs)
    for j, r in executor.map_queue(fn, [specs[i] for i in order], quota=queue_quota(batch), init=_init_worker,
                                   close=_close_worker,
                                   initargs=(executor.ship(checkpoint), sim_cfg.model_dump(), overrides,
                                             text_cache_path())):
        i = order[j]
        out[i] = r
        if on_done:
            on_done(i, r)
    return out  # type: ignore[return-value]
