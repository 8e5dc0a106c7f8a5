"""CoDA's action contract in LIBERO: 5-D absolute targets, converted to and from LIBERO's 7-D OSC_POSE deltas.

A CoDA policy acts with `(x, y, z, yaw, grip)`: the grip site position it should move towards (world, m),
the heading of the grip site's x axis about the vertical (`LiberoState.eef_yaw`; pi/2 is the expert's pose,
fingers closing along world y), pointing down, and grip (1 open .. 0 closed, below 0.5 closes).
`target_to_action` turns a target into the OSC_POSE delta that moves towards it (gain 1: the whole position
error, clipped to one action unit, 0.05 m, per step). `action_to_target` is its inverse on the expert's
actions: the target whose conversion gives back the same action, so demonstrations recorded as targets and
replayed through `TargetActionEnv` reproduce the expert's episode exactly.

- `TargetActionEnv(env)`: a `LiberoEnv` whose `step` takes targets (everything else passes through).
- `LiberoRoundEnv(sim)`: a `TargetActionEnv` as rounds use envs (snapshots counted, tabletop camera names).
- `RelabellingExpert(env)`: `TargetExpert` replanned after every snapshot (corrective labels).
- `TargetExpert(env)`: the scripted expert of the env's current episode (pick-and-place, stove knob), acting in targets
  (`coda.policy.data.run_expert_episode` and `collect_demos` record it like a tabletop expert).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.sim.config import SimConfig
from coda.sim.libero.errors import LiberoError
from coda.sim.libero.experts import DOWN_Y, HEADING_Y, POS_SCALE, ROT_SCALE, DrawerExpert, DrawerPlaceExpert, Expert, _rotvec, expert_for, yaw_rotation
from coda.sim.libero.state import LiberoState

if TYPE_CHECKING:
    from coda.sim.libero.env import LiberoEnv

EXPERT_YAW = HEADING_Y  # the expert's usual heading (fingers closing along world y)


def target_to_action(target: Sequence[float], state: LiberoState, gain: float = 1.0) -> np.ndarray:
    """The OSC_POSE delta (7,) that moves the grip site towards a 5-D absolute target.

    Args:
        target: (x, y, z, yaw, grip), see the module docstring.
        state: the current state (grip site pose).
        gain: proportional gain on the position error.
    Raises:
        LiberoError: the target is not 5 finite numbers.
    """
    t = np.asarray(target, dtype=np.float64).reshape(-1)
    if t.shape != (5,) or not np.all(np.isfinite(t)):
        raise LiberoError(f"target must be 5 finite numbers (x, y, z, yaw, grip), got {t.tolist()}")
    a = np.zeros(7)
    a[:3] = np.clip(gain * (t[:3] - state.eef_pos) / POS_SCALE, -1.0, 1.0)
    a[3:6] = np.clip(_rotvec(yaw_rotation(t[3] - HEADING_Y) @ DOWN_Y @ state.eef_rot.T) / ROT_SCALE, -1.0, 1.0)
    a[6] = 1.0 if t[4] < 0.5 else -1.0
    return a.astype(np.float32)


def action_to_target(action: Sequence[float], state: LiberoState, heading: float = EXPERT_YAW) -> np.ndarray:
    """The 5-D target (float32) that `target_to_action` (gain 1) turns back into `action`, for an action that
    turns the grip site towards pointing down with `heading` (the scripted expert's actions do, with its
    `heading`).

    Raises:
        LiberoError: the action is not 7 finite numbers in [-1, 1].
    """
    a = np.asarray(action, dtype=np.float64).reshape(-1)
    if a.shape != (7,) or not np.all(np.isfinite(a)) or np.any(np.abs(a) > 1.0 + 1e-6):
        raise LiberoError(f"action must be 7 finite numbers in [-1, 1], got {a.tolist()}")
    pos = state.eef_pos + a[:3] * POS_SCALE
    return np.array([*pos, heading, 0.0 if a[6] > 0 else 1.0], dtype=np.float32)


class TargetActionEnv:
    """A `LiberoEnv` acting in 5-D targets: `step(target)` converts with `target_to_action` at the current
    state; every other attribute is the wrapped env's."""

    def __init__(self, env: "LiberoEnv", gain: float = 1.0) -> None:
        self.env = env
        self.gain = gain

    def step(self, target: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self.env.step(target_to_action(target, self.env.state(), self.gain))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


class TargetExpert:
    """The scripted expert of the env's current episode (built at `reset()`, after the env was reset),
    returning targets: `act(state) -> (5,)`."""

    def __init__(self, env: "LiberoEnv | TargetActionEnv") -> None:
        self.env = env
        self.expert: Expert | None = None

    def reset(self) -> None:
        """Build the episode's expert.

        Raises:
            LiberoError: the episode's expert turns the hand off pointing down (opening a drawer), which the
                5-D targets cannot express.
        """
        env = self.env.env if isinstance(self.env, TargetActionEnv) else self.env
        expert = expert_for(env)
        if isinstance(expert, DrawerExpert | DrawerPlaceExpert):
            raise LiberoError(f"goal = {env.goal}: the drawer expert turns the hand to face the drawer, and 5-D targets "
                              "keep it pointing down; its demos exist only as 7-D OSC_POSE actions")
        self.expert = expert

    def act(self, state: LiberoState) -> np.ndarray:
        if self.expert is None:
            self.reset()
        assert self.expert is not None
        action = self.expert.act(state)  # chooses the expert's heading on its first call
        return action_to_target(action, state, self.expert.heading if self.expert.heading is not None else EXPERT_YAW)


class LiberoRoundEnv(TargetActionEnv):
    """A `LiberoEnv` acting in 5-D targets, as the round loop uses envs: `get_state` snapshots are counted
    (a relabelling expert restarts its plan at each one), and `render` takes tabletop camera names."""

    def __init__(self, sim: "SimConfig | None" = None) -> None:
        from coda.sim.libero.env import LiberoEnv

        super().__init__(LiberoEnv(config=sim or SimConfig(backend="libero")))
        self.snapshots = 0

    def get_state(self) -> Any:
        self.snapshots += 1
        return self.env.get_state()

    def render(self, camera: str = "agentview", size: int | None = None) -> np.ndarray:
        return self.env.render("agentview" if camera == "front" else camera, size)

    def close(self) -> None:
        self.env.close()


class RelabellingExpert:
    """The scripted expert in targets, replanned from the current state whenever the env was snapshotted
    since its last action: corrective labels start from a failure state, not from the expert's old plan."""

    def __init__(self, env: LiberoRoundEnv) -> None:
        self.env = env
        self.inner = TargetExpert(env)
        self._seen = -1

    def reset(self) -> None:
        self.inner.reset()
        self._seen = self.env.snapshots

    def act(self, state: Any) -> np.ndarray:
        if self._seen != self.env.snapshots:
            self.reset()
        return self.inner.act(state)


__all__ = ["EXPERT_YAW", "LiberoRoundEnv", "RelabellingExpert", "TargetActionEnv", "TargetExpert", "action_to_target",
           "target_to_action"]
