"""`TabletopEnv`: the built-in MuJoCo tabletop as a gymnasium environment.

Action: float32 (5,) absolute end-effector targets (x, y, z, yaw, grip), clipped to the action box
(`geometry.ACTION_LOW/HIGH`: x, y within the workspace |x|, |y| <= 0.30 m, z in [0.005, 0.40] m,
yaw in [-pi/2, pi/2] rad, grip in [0, 1] with 1 open and 0 closed). One `step` holds the targets for
one control period (1 / `SimConfig.control_hz`, 25 physics steps of 2 ms by default).

Observation: see `coda.sim.tabletop.observation` (proprio, objects, object_mask, object_text,
instruction).

Success rule: an episode is solved when the goal holds at its end. It ends early, solved, once the goal
(`goal_satisfied`) has held for `SimConfig.success_hold_steps` consecutive control steps with neither finger
touching any entity the goal names (the gripper has let go); a goal the episode only passes through (a
drawer opened past "halfway", an object pushed across its region) is not success. At the time limit the
episode is solved if the goal holds in its final state.

Reward: sparse, 1.0 on the step that ends the episode solved, else 0.0. `terminated` is True on that step;
`truncated` is True when `SimConfig.max_steps` control steps have run (or the physics diverged, with
`info["sim_error"]`). `info["success"]` is always present: True only on the step that ends the episode
solved; `info["goal"]` is whether the goal holds in the current state (`goal_satisfied(state, spec)`).

Determinism: the same spec and the same actions give bitwise identical physics (the seed only seeds
`self.np_random`, used by an optional scene sampler).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from coda.sim.tabletop import _gl  # noqa: F401  (must run before mujoco is imported)

import mujoco  # noqa: E402

from coda.errors import CodaError  # noqa: E402
from coda.scene.spec import ScenarioSpec  # noqa: E402
from coda.sim.config import SimConfig  # noqa: E402
from coda.scene import geometry as G  # noqa: E402
from coda.sim.tabletop.builder import BuiltScene, build_scene, finger_target  # noqa: E402
from coda.sim.tabletop.observation import ObservationBuilder, observation_space  # noqa: E402
from coda.sim.tabletop.predicates import TabletopState, goal_satisfied, released  # noqa: E402
from coda.sim.tabletop.reader import StateReader  # noqa: E402

ACTION_LOW = np.array(G.ACTION_LOW, dtype=np.float32)
ACTION_HIGH = np.array(G.ACTION_HIGH, dtype=np.float32)
_LOW, _HIGH = ACTION_LOW.astype(np.float64).tolist(), ACTION_HIGH.astype(np.float64).tolist()
_STATE_SIG = mujoco.mjtState.mjSTATE_INTEGRATION
_BADQACC = int(mujoco.mjtWarning.mjWARN_BADQACC)


class EnvError(CodaError, ValueError):
    """Bad use of the environment: a malformed action or snapshot, or no scenario to reset to."""


@dataclass(frozen=True, eq=False)
class SimSnapshot:
    """A full physics snapshot: restoring it and stepping with the same actions reproduces the future bitwise."""

    spec: ScenarioSpec  # the scene the snapshot belongs to
    physics: np.ndarray  # mj_getState(mjSTATE_INTEGRATION): time, qpos, qvel, act, ctrl, warm start, ...
    steps: int  # control steps taken in the episode
    grip_cmd: float  # last grip command
    held: int = 0  # consecutive control steps the goal has held with the gripper off its entities


class TabletopEnv(gym.Env):
    """The tabletop backend behind the gymnasium API (see the module docstring for spaces and reward).

    Args:
        spec: the scenario to reset to when `reset` gets no `options["spec"]`.
        config: simulator settings; defaults to `SimConfig()`.
        sampler: optional `rng -> ScenarioSpec` used by `reset` when neither `options["spec"]` nor `spec`
            is given, seeded through `reset(seed=...)`.
        render_mode: None or "rgb_array" (then `render()` returns the "front" camera).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        spec: ScenarioSpec | None = None,
        config: SimConfig | None = None,
        *,
        sampler: Callable[[np.random.Generator], ScenarioSpec] | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.config = config or SimConfig()
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"render_mode = {render_mode!r} is not supported; use None or 'rgb_array'")
        self.render_mode = render_mode
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": self.config.control_hz}
        self.action_space = gym.spaces.Box(ACTION_LOW, ACTION_HIGH, dtype=np.float32)
        self.observation_space = observation_space(self.config.max_entities, self.config.max_text_length)
        self._default_spec = spec
        self._sampler = sampler
        self._scene: BuiltScene | None = None
        self._data: mujoco.MjData | None = None
        self._reader: StateReader | None = None
        self._obs: ObservationBuilder | None = None
        self._renderers: dict[int, Any] = {}
        self._steps = 0
        self._held = 0
        self._grip = 1.0
        self._state: TabletopState | None = None

    # ---- properties -----------------------------------------------------------------------------

    @property
    def scenario(self) -> ScenarioSpec:
        """The scenario of the current episode."""
        return self._need_scene().spec

    @property
    def scene(self) -> BuiltScene:
        """The compiled scene (model and index) of the current episode."""
        return self._need_scene()

    @property
    def model(self) -> mujoco.MjModel:
        return self._need_scene().model

    @property
    def data(self) -> mujoco.MjData:
        self._need_scene()
        assert self._data is not None
        return self._data

    @property
    def steps(self) -> int:
        """Control steps taken since the last reset."""
        return self._steps

    def _need_scene(self) -> BuiltScene:
        if self._scene is None:
            raise EnvError("the environment has no scene yet: call reset(options={'spec': ...}) or reset_to(spec)")
        return self._scene

    # ---- episode --------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode. `options` may carry {"spec": ScenarioSpec}; otherwise the sampler draws one
        (seeded by `seed`), else the current scenario restarts, else the constructor's spec is used.
        Raises EnvError when there is none."""
        super().reset(seed=seed)
        options = options or {}
        unknown = set(options) - {"spec"}
        if unknown:
            raise EnvError(f"reset options {sorted(unknown)} are not known; the only option is 'spec'")
        spec = options.get("spec")
        if spec is not None and not isinstance(spec, ScenarioSpec):
            raise EnvError(f"reset option 'spec' must be a ScenarioSpec, got {type(spec).__name__}")
        if spec is None:
            if self._sampler is not None:
                spec = self._sampler(self.np_random)
            elif self._scene is not None:
                spec = self._scene.spec
            elif self._default_spec is not None:
                spec = self._default_spec
            else:
                raise EnvError("reset needs a scenario: pass options={'spec': spec}, or give the env a spec or sampler")
        return self.reset_to(spec)

    def reset_to(self, spec: ScenarioSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        """Build (or reuse) the scene of `spec`, put it in its initial state and return (obs, info)."""
        self._load(spec)
        assert self._scene is not None and self._data is not None
        m, d, idx = self._scene.model, self._data, self._scene.index
        mujoco.mj_resetData(m, d)
        d.qpos[:] = idx.init_qpos
        d.ctrl[:] = idx.init_ctrl
        self._grip = float(spec.robot.grip)
        if self.config.settle_steps:
            mujoco.mj_step(m, d, nstep=idx.substeps * self.config.settle_steps)
            d.time = 0.0  # episode time starts once the scene has settled
        mujoco.mj_forward(m, d)
        self._steps = 0
        self._held = 0
        s = self._read()
        return self._obs_of(s), {"success": False, "goal": goal_satisfied(s, spec), "steps": 0}

    def _load(self, spec: ScenarioSpec) -> None:
        if self._scene is not None and (spec is self._scene.spec or spec == self._scene.spec):
            return
        scene = build_scene(spec, self.config)
        obs = ObservationBuilder(scene.index, spec.instruction, self.config.max_entities, self.config.max_text_length)
        self._close_renderers()
        self._scene, self._obs = scene, obs
        self._data = mujoco.MjData(scene.model)
        self._reader = StateReader(scene)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Hold the clipped targets for one control period; see the module docstring for the return values."""
        scene = self._need_scene()
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (5,):
            raise EnvError(f"action must have shape (5,) = (x, y, z, yaw, grip), got shape {a.shape}")
        x, y, z, yaw, grip = a.tolist()
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z) and math.isfinite(yaw) and math.isfinite(grip)):
            raise EnvError(f"action = {a.tolist()} has non-finite values")
        # Clip in plain Python: five scalars are cheaper than a numpy call.
        lo, hi = _LOW, _HIGH
        x, y, z = min(max(x, lo[0]), hi[0]), min(max(y, lo[1]), hi[1]), min(max(z, lo[2]), hi[2])
        yaw, grip = min(max(yaw, lo[3]), hi[3]), min(max(grip, lo[4]), hi[4])
        self._grip = grip
        fq = finger_target(grip)
        d = self._data
        m = scene.model
        d.ctrl[:] = (x, y, z, yaw, fq, fq)
        mujoco.mj_step(m, d, nstep=scene.index.substeps)
        mujoco.mj_kinematics(m, d)  # body poses for the new qpos (mj_step leaves them one substep behind)
        self._steps += 1
        s = self._state = self._reader.read(d, grip)  # type: ignore[union-attr]
        goal = goal_satisfied(s, scene.spec)
        self._held = self._held + 1 if goal and released(s, scene.spec) else 0
        truncated = self._steps >= self.config.max_steps
        diverged = bool(d.warning[_BADQACC].number)
        success = not diverged and (self._held >= self.config.success_hold_steps or (truncated and goal))
        info: dict[str, Any] = {"success": success, "goal": goal, "steps": self._steps}
        if diverged:
            info["sim_error"] = f"physics diverged (bad accelerations) at step {self._steps}"
            truncated = True
        return self._obs.build(s), (1.0 if success else 0.0), success, truncated, info  # type: ignore[union-attr]

    # ---- state ----------------------------------------------------------------------------------

    def _read(self) -> TabletopState:
        assert self._reader is not None and self._data is not None
        self._state = self._reader.read(self._data, self._grip)
        return self._state

    def _obs_of(self, s: TabletopState) -> dict[str, Any]:
        assert self._obs is not None
        return self._obs.build(s)

    def state(self) -> TabletopState:
        """The privileged state now (cached between steps; it is immutable)."""
        self._need_scene()
        return self._state if self._state is not None else self._read()

    def observation(self) -> dict[str, Any]:
        """The observation of the current state (as `step` would return it)."""
        return self._obs_of(self.state())

    def get_state(self) -> SimSnapshot:
        """A full snapshot of the physics (for corrective demonstrations from a policy's failure states)."""
        scene = self._need_scene()
        assert self._data is not None
        size = mujoco.mj_stateSize(scene.model, _STATE_SIG)
        buf = np.empty(size)
        mujoco.mj_getState(scene.model, self._data, buf, _STATE_SIG)
        return SimSnapshot(spec=scene.spec, physics=buf, steps=self._steps, grip_cmd=self._grip, held=self._held)

    def set_state(self, snapshot: SimSnapshot) -> dict[str, Any]:
        """Restore a snapshot (rebuilding the scene if it belongs to another spec); returns the observation."""
        if not isinstance(snapshot, SimSnapshot):
            raise EnvError(f"set_state needs a SimSnapshot, got {type(snapshot).__name__}")
        self._load(snapshot.spec)
        assert self._scene is not None and self._data is not None
        size = mujoco.mj_stateSize(self._scene.model, _STATE_SIG)
        if snapshot.physics.shape != (size,):
            raise EnvError(f"snapshot physics has shape {snapshot.physics.shape}, this scene needs ({size},)")
        mujoco.mj_setState(self._scene.model, self._data, snapshot.physics, _STATE_SIG)
        mujoco.mj_forward(self._scene.model, self._data)
        self._steps, self._grip, self._held = snapshot.steps, snapshot.grip_cmd, snapshot.held
        return self._obs_of(self._read())

    # ---- rendering ------------------------------------------------------------------------------

    def render(self, camera: str = "front", size: int | None = None) -> np.ndarray:  # type: ignore[override]
        """An RGB image (uint8, size x size x 3) of the current state from `camera` ("front" or "wrist")."""
        from coda.sim.tabletop.render import render_frame

        scene = self._need_scene()
        assert self._data is not None
        if size is not None and not 16 <= size <= 4096:
            raise EnvError(f"render size = {size}: must be in [16, 4096] pixels")
        px = int(size if size is not None else self.config.render_size)
        renderer = self._renderers.get(px)
        if renderer is None:
            from coda.sim.tabletop.render import make_renderer

            renderer = self._renderers[px] = make_renderer(scene.model, px)
        return render_frame(renderer, self._data, camera)

    def _close_renderers(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    def close(self) -> None:
        """Release the renderers (their GL contexts) and the physics data."""
        self._close_renderers()
        self._data = None
        self._scene = None
        self._reader = None
        self._obs = None
        self._state = None
