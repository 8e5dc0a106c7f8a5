"""The official LIBERO / LIBERO-PRO evaluation protocol, and the adapter that lets a CoDA policy act in LIBERO.

Protocol (as in LIBERO's own evaluation): for every task of a suite, the suite's BDDL file and its
`(:language ...)` instruction (never the task's file name, which ignores the `_lan` / `_task` edits of the
PRO suites), each of the task's official initial states (50), `settle_steps` no-op steps (10, gripper
open), then the policy until `check_success()` holds or the suite's horizon (spatial 220, object 280, goal
300, libero_10 520 control steps) runs out. Success is `check_success()`. Per task: success rate with a
Wilson 95% interval; the suite: the mean over tasks and the pooled interval.

Policies act through `EpisodePolicy`: `reset()` at the start of an episode and `act(obs, state) -> (7,)`
LIBERO action. `ExpertPolicy` is the privileged scripted expert; `TargetPolicyAdapter` wraps anything that
returns CoDA's 5-D absolute targets `(x, y, z, yaw, grip)` (a `ChunkPolicy.select_action`) and turns each
target into the OSC_POSE delta that moves the grip site towards it, pointing down with the given heading.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from coda.sim.libero.errors import LiberoError
from coda.sim.libero.experts import expert_for
from coda.sim.libero.scenario import LiberoScenario
from coda.sim.libero.state import LiberoState
from coda.sim.libero.targets import target_to_action

if TYPE_CHECKING:
    from coda.sim.libero.env import LiberoEnv

N_OFFICIAL_INITS = 50  # official initial states per task


class EpisodePolicy(Protocol):
    def reset(self) -> None: ...

    def act(self, obs: dict[str, Any], state: LiberoState) -> np.ndarray: ...


class TargetPolicyAdapter:
    """A policy of 5-D absolute targets (`reset()`, `select_action(obs) -> (5,)`) acting in LIBERO.

    With `env`, a policy whose `reset` takes a seed is reseeded per episode from the env's scenario
    (`coda.engine.rollout.episode_seed`), so sampled chunks depend on the scenario, not on the order.
    """

    def __init__(self, policy: Any, gain: float = 1.0, env: "LiberoEnv | None" = None) -> None:
        self.policy = policy
        self.gain = gain
        self.env = env

    def reset(self) -> None:
        if self.env is None:
            self.policy.reset()
            return
        from coda.engine.rollout import reset_for_episode

        reset_for_episode(self.policy, self.env.scenario)

    def act(self, obs: dict[str, Any], state: LiberoState) -> np.ndarray:
        return target_to_action(self.policy.select_action(obs), state, self.gain)


class ExpertPolicy:
    """The episode's privileged scripted expert (`coda.sim.libero.experts.expert_for`) as an episode policy."""

    def __init__(self, env: "LiberoEnv") -> None:
        self.env = env
        self._expert: Any = None

    def reset(self) -> None:
        self._expert = expert_for(self.env)

    def act(self, obs: dict[str, Any], state: LiberoState) -> np.ndarray:
        return self._expert.act(state)


@dataclass(frozen=True)
class TaskResult:
    """One task's official evaluation."""

    suite: str
    task_id: int
    instruction: str  # the BDDL (:language) instruction the policy was given
    init_states: tuple[int, ...]
    successes: tuple[bool, ...]
    steps: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.successes)

    @property
    def success(self) -> float:
        return float(np.mean(self.successes)) if self.successes else float("nan")

    @property
    def ci95(self) -> tuple[float, float]:
        from coda.policy.stats import wilson_interval

        return wilson_interval(int(sum(self.successes)), self.n)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.ci95
        return {"task_id": self.task_id, "instruction": self.instruction, "n": self.n, "success": self.success,
                "ci95": [lo, hi], "init_states": list(self.init_states), "steps": list(self.steps),
                "successes": [bool(x) for x in self.successes]}


@dataclass(frozen=True)
class SuiteResult:
    """A suite's official evaluation: per task, the mean over tasks and the pooled interval."""

    suite: str
    tasks: tuple[TaskResult, ...]
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_success(self) -> float:
        return float(np.mean([t.success for t in self.tasks])) if self.tasks else float("nan")

    @property
    def ci95(self) -> tuple[float, float]:
        from coda.policy.stats import wilson_interval

        n = sum(t.n for t in self.tasks)
        return wilson_interval(sum(int(sum(t.successes)) for t in self.tasks), n)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.ci95
        return {"suite": self.suite, "mean_success": self.mean_success, "ci95": [lo, hi],
                "episodes": sum(t.n for t in self.tasks), "seconds": self.seconds,
                "tasks": [t.as_dict() for t in self.tasks], "meta": dict(self.meta)}


def run_episode(env: "LiberoEnv", policy: EpisodePolicy, scenario: LiberoScenario,
                max_steps: int | None = None) -> tuple[bool, int]:
    """Reset to `scenario`, run `policy` until success or the horizon; (success, control steps)."""
    obs, info = env.reset_to(scenario)
    policy.reset()
    horizon = int(max_steps or env.max_steps)
    success = bool(info["success"])
    while not success and env.steps < horizon:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, env.state()))
        success = bool(info["success"])
        if terminated or truncated:
            break
    return success, env.steps


def evaluate_suite(
    env: "LiberoEnv",
    policy_for: Callable[["LiberoEnv"], EpisodePolicy],
    suite: str,
    tasks: Sequence[int] | None = None,
    init_states: Sequence[int] | int = N_OFFICIAL_INITS,
    *,
    progress: Callable[[str], None] | None = None,
) -> SuiteResult:
    """The official protocol on `suite` (see the module docstring).

    Args:
        env: the environment (its settle steps and horizon are the suite's unless it was built otherwise).
        policy_for: builds the policy for the env (called once).
        tasks: task ids (default: every task of the suite).
        init_states: how many of the official initial states (the first N), or which ones.
        progress: called with one line after each episode.
    Raises:
        LiberoError: an unknown suite, task or initial state (with the valid range).
    """
    from coda.sim.libero import suites as S

    all_tasks = S.list_tasks(suite)
    ids = list(range(len(all_tasks))) if tasks is None else [int(t) for t in tasks]
    bad = [t for t in ids if not 0 <= t < len(all_tasks)]
    if bad:
        raise LiberoError(f"suite '{suite}' has tasks 0..{len(all_tasks) - 1}; got {bad}")
    policy = policy_for(env)
    t0 = time.perf_counter()
    results = []
    for task_id in ids:
        n_official = len(S.init_states(suite, task_id))
        inits = list(range(min(int(init_states), n_official))) if isinstance(init_states, int) else [int(i) for i in init_states]
        out_of_range = [i for i in inits if not 0 <= i < n_official]
        if out_of_range:
            raise LiberoError(f"task {task_id} of '{suite}' has official initial states 0..{n_official - 1}; got {out_of_range}")
        successes, steps = [], []
        for i in inits:
            ok, n = run_episode(env, policy, LiberoScenario(suite, task_id, init_state=i))
            successes.append(ok)
            steps.append(n)
            if progress is not None:
                progress(f"{suite} task {task_id} init {i}: {'success' if ok else 'failure'} in {n} steps")
        results.append(TaskResult(suite, task_id, env.instruction, tuple(inits), tuple(successes), tuple(steps)))
    return SuiteResult(suite, tuple(results), time.perf_counter() - t0)


__all__ = ["ExpertPolicy", "SuiteResult", "TargetPolicyAdapter", "TaskResult", "evaluate_suite", "run_episode",
           "target_to_action"]
