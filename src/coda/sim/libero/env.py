"""`LiberoEnv`: a LIBERO / LIBERO-PRO task behind the gymnasium API, physics only, keyframes on demand.

Action: float32 (7,) in [-1, 1], LIBERO's OSC_POSE delta action: [0:3] end-effector translation (scaled by
0.05 m per step), [3:6] rotation (axis-angle, scaled by 0.5 rad), [6] gripper (-1 open, +1 close).
Control runs at 20 Hz (25 physics steps of 2 ms).

Observation: see `coda.sim.libero.observation` (proprio, objects, object_mask, object_text, instruction).

Reward: sparse, 1.0 on the step where the BDDL goal holds (LIBERO's `check_success()`), then `terminated`;
`truncated` after `max_steps` control steps (the suite's usual evaluation horizon unless given).
`info["success"]` is always present.

Episodes start from a `LiberoScenario`: the task's official BDDL file or edited BDDL text (written to a
private temporary directory, never next to the package's files), then either one of the task's official
initial states or placements sampled from the BDDL regions with the scenario's seed; then `settle_steps`
no-op steps (gripper open) so objects come to rest. The same scenario and the same actions give the same
episode. A new `ControlEnv` (about 4 s) is built only when the BDDL text changes; otherwise a soft reset
reuses the compiled model.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from coda.gl import configure_headless_gl

configure_headless_gl("auto")  # MuJoCo reads MUJOCO_GL when first imported

import mujoco  # noqa: E402

from coda.sim.config import SimConfig  # noqa: E402
from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.errors import LiberoError, LiberoUnavailableError  # noqa: E402
from coda.sim.libero.observation import ObservationBuilder, observation_space  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402
from coda.sim.libero.state import LiberoState, StateReader  # noqa: E402

ACTION_DIM = 7
NOOP = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)  # hold the pose, gripper open
PLACEMENT_TRIES = 50  # placement sampling attempts before a scenario is declared unplaceable
CAMERAS = {"agentview": "agentview", "front": "agentview", "robot0_eye_in_hand": "robot0_eye_in_hand",
           "wrist": "robot0_eye_in_hand"}


@dataclass(frozen=True, eq=False)
class LiberoSnapshot:
    """A physics snapshot (MuJoCo time, qpos, qvel), the state the next steps also depend on (the grippers'
    integrated finger commands, MuJoCo's solver warm start, the privileged state read after the last step)
    and the episode counters."""

    scenario: LiberoScenario
    physics: np.ndarray  # ControlEnv.get_sim_state(): flattened time, qpos, qvel
    steps: int
    grip_cmd: float
    fingers: tuple[np.ndarray, ...]  # each robot's gripper `current_action` (robosuite integrates it per step)
    warmstart: np.ndarray  # MjData.qacc_warmstart
    # The state `state()` gave: read after a step, MuJoCo's positions of sites and bodies are those its last
    # substep started from, and the next step's targets are computed from them; reading them again after a
    # restore would give the integrated ones and another next step.
    state: LiberoState


def _fixture_homes(env: Any) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(body id, position, quaternion) of each fixture's root body as the scene's MJCF declares it."""
    import xml.etree.ElementTree as ET

    bodies = {b.get("name"): b for b in ET.fromstring(env.model.get_xml()).iter("body")}
    homes = []
    for fixture in env.fixtures_dict.values():
        body = bodies.get(fixture.root_body)
        attrs = body.attrib if body is not None else {}
        pos = np.array(attrs.get("pos", "0 0 0").split(), float)
        quat = np.array(attrs.get("quat", "1 0 0 0").split(), float)
        homes.append((env.sim.model.body_name2id(fixture.root_body), pos, quat))
    return homes


def _control_env_cls() -> Any:
    try:
        from libero.libero.envs.env_wrapper import ControlEnv
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise LiberoUnavailableError.from_import(e) from e
    return ControlEnv


class LiberoEnv(gym.Env):
    """A LIBERO task as a gymnasium environment (see the module docstring for spaces and reward).

    Args:
        scenario: the scenario `reset` uses when it gets no `options["scenario"]`.
        config: simulator settings (`max_entities`, `max_text_length`, `render_size` apply).
        settle_steps: no-op control steps after the initial state is set.
        max_steps: episode horizon in control steps; None = the suite's evaluation horizon.
        render_mode: None or "rgb_array" (then `render()` returns the agent-view camera).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        scenario: LiberoScenario | None = None,
        config: SimConfig | None = None,
        *,
        settle_steps: int = S.SETTLE_STEPS,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.config = config or SimConfig(backend="libero")
        if render_mode not in (None, "rgb_array"):
            raise LiberoError(f"render_mode = {render_mode!r} is not supported; use None or 'rgb_array'")
        if settle_steps < 0:
            raise LiberoError(f"settle_steps = {settle_steps} must be >= 0")
        if max_steps is not None and max_steps < 1:
            raise LiberoError(f"max_steps = {max_steps} must be >= 1")
        if scenario is not None and not isinstance(scenario, LiberoScenario):
            raise LiberoError(f"scenario must be a LiberoScenario, got {type(scenario).__name__}")
        self.render_mode = render_mode
        self.settle_steps = settle_steps
        self._max_steps_arg = max_steps
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), dtype=np.float32)
        self.observation_space = observation_space(self.config.max_entities, self.config.max_text_length)
        self._default = scenario
        self._scenario: LiberoScenario | None = None
        self._ctrl: Any = None  # libero ControlEnv
        self._bddl: str | None = None  # BDDL text the ControlEnv was built from
        self._fixture_homes: list[tuple[int, np.ndarray, np.ndarray]] = []  # fixture root bodies as the MJCF has them
        self._tmpdir: Path | None = None
        self._reader: StateReader | None = None
        self._obs: ObservationBuilder | None = None
        self._instruction = ""
        self._goal: list[list[str]] = []
        self._interest: list[str] = []
        self._init_cache: dict[tuple[str, int], np.ndarray] = {}
        self._renderers: dict[int, mujoco.Renderer] = {}
        self._steps = 0
        self._grip = -1.0
        self._success = False
        self._state: LiberoState | None = None
        self.max_steps = max_steps or 1

    # ---- properties -----------------------------------------------------------------------------

    @property
    def scenario(self) -> LiberoScenario:
        """The scenario of the current episode."""
        return self._need_scenario()

    def _need_scenario(self) -> LiberoScenario:
        if self._scenario is None:
            raise LiberoError("the environment has no scenario yet: call reset(options={'scenario': ...}) or reset_to(...)")
        return self._scenario

    @property
    def instruction(self) -> str:
        """The episode's instruction (the BDDL `(:language ...)` field)."""
        self._need_scenario()
        return self._instruction

    @property
    def control_env(self) -> Any:
        """The underlying `libero.libero.envs.env_wrapper.ControlEnv` (privileged access)."""
        self._need_scenario()
        return self._ctrl

    @property
    def steps(self) -> int:
        """Control steps taken since the episode started (after settling)."""
        return self._steps

    # ---- episode --------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode from `options["scenario"]`, else the current scenario, else the constructor's.
        With `seed`, a scenario that samples placements (`init_state=None`) uses that seed.
        Raises LiberoError when there is no scenario or an option is unknown."""
        super().reset(seed=seed)
        options = options or {}
        unknown = set(options) - {"scenario"}
        if unknown:
            raise LiberoError(f"reset options {sorted(unknown)} are not known; the only option is 'scenario'")
        scenario = options.get("scenario") or self._scenario or self._default
        if scenario is None:
            raise LiberoError("reset needs a scenario: pass options={'scenario': LiberoScenario(...)} or give the env one")
        if not isinstance(scenario, LiberoScenario):
            raise LiberoError(f"reset option 'scenario' must be a LiberoScenario, got {type(scenario).__name__}")
        if seed is not None and scenario.init_state is None:
            scenario = dataclasses.replace(scenario, seed=int(seed) % 2**32)
        return self.reset_to(scenario)

    def reset_to(self, scenario: LiberoScenario) -> tuple[dict[str, Any], dict[str, Any]]:
        """Load `scenario` (rebuilding only if its BDDL text changed), set its initial state, settle and
        return (obs, info). Raises LiberoError for a BDDL that does not load, placements that cannot be
        sampled, or an initial-state index out of range or of the wrong size."""
        if not isinstance(scenario, LiberoScenario):
            raise LiberoError(f"reset_to needs a LiberoScenario, got {type(scenario).__name__}")
        text = scenario.bddl_text()
        self._load(scenario, text)
        env = self._ctrl.env
        from robosuite.utils.errors import RandomizationError

        saved = np.random.get_state()  # LIBERO samples placements from numpy's global generator
        try:
            np.random.seed(scenario.seed)
            for _ in range(PLACEMENT_TRIES):
                try:
                    self._home_fixtures()
                    env.reset()
                    break
                except RandomizationError:
                    continue
            else:
                raise LiberoError(
                    f"cannot place the objects of suite '{scenario.suite}' task {scenario.task_id} "
                    f"(seed {scenario.seed}) after {PLACEMENT_TRIES} tries: regions too small or overlapping"
                )
        finally:
            np.random.set_state(saved)
        if scenario.init_state is not None:
            self._ctrl.set_init_state(self._official_state(scenario, len(self._ctrl.get_sim_state())))
        # A soft reset keeps the gripper's integrated finger command and MuJoCo's solver warm start from the
        # previous episode, which made an episode depend on what ran before it in this env: start both cold,
        # as a newly built env does.
        for gripper in self._grippers():
            gripper.current_action = np.zeros(gripper.dof)
        env.sim.data.qacc_warmstart[:] = 0.0
        for _ in range(self.settle_steps):
            self._ctrl.step(NOOP)
        self._scenario = scenario
        self.max_steps = self._max_steps_arg or S.max_steps(scenario.suite)
        self._steps, self._grip = 0, -1.0
        self._success = bool(self._ctrl.check_success())
        s = self._read()
        return self._obs.build(s), {"success": self._success, "steps": 0}  # type: ignore[union-attr]

    def _home_fixtures(self) -> None:
        """Put the fixtures back where the scene's MJCF has them before a soft reset samples placements.

        LIBERO places an object that starts on a fixture's region (a bowl on the stove's cook region, on
        the cabinet's top) at the fixture's sampled position plus the region site's world position, read
        before the fixtures are moved. That is the site's offset within the fixture only while the fixture
        sits at its MJCF origin, as after a hard reset; after a soft reset the fixture's previous position
        was counted twice and the bowl was put down off the table, beside the robot.
        """
        model = self._ctrl.env.sim.model
        for body_id, pos, quat in self._fixture_homes:
            model.body_pos[body_id] = pos
            model.body_quat[body_id] = quat

    def _official_state(self, scenario: LiberoScenario, size: int) -> np.ndarray:
        key = (scenario.suite, scenario.task_id)
        if key not in self._init_cache:
            self._init_cache[key] = S.init_states(*key)
        states = self._init_cache[key]
        i = scenario.init_state
        assert i is not None
        if i >= len(states):
            raise LiberoError(
                f"scenario init_state ({i}) is out of range: suite '{scenario.suite}' task {scenario.task_id} "
                f"has {len(states)} official initial states"
            )
        if states.shape[1] != size:
            raise LiberoError(
                f"official initial state {i} of suite '{scenario.suite}' task {scenario.task_id} has "
                f"{states.shape[1]} values but this BDDL's scene needs {size}: edited BDDL text changed the "
                "objects; sample placements instead (init_state=None)"
            )
        return states[i]

    def _load(self, scenario: LiberoScenario, text: str) -> None:
        if self._ctrl is not None and text == self._bddl:
            return
        self._close_sim()
        if scenario.bddl is None:
            path = S.get_task(scenario.suite, scenario.task_id).bddl_path
        else:
            S.bddl_language(text)  # fail early, naming the field, on malformed text
            if self._tmpdir is None:
                self._tmpdir = Path(tempfile.mkdtemp(prefix="coda_libero_"))
            path = self._tmpdir / "scenario.bddl"
            path.write_text(text, encoding="utf-8")
        control_env = _control_env_cls()
        try:
            self._ctrl = control_env(
                bddl_file_name=str(path), has_offscreen_renderer=False, use_camera_obs=False,
                hard_reset=False, ignore_done=True, horizon=10**7,
            )
        except Exception as e:  # LIBERO reports bad BDDL with assorted exception types
            raise LiberoError(
                f"BDDL text of suite '{scenario.suite}' task {scenario.task_id} does not load: {type(e).__name__}: {e}"
            ) from None
        self._bddl = text
        env = self._ctrl.env
        self._fixture_homes = _fixture_homes(env)
        self._instruction = str(self._ctrl.language_instruction)
        self._goal = [list(map(str, g)) for g in env.parsed_problem["goal_state"]]
        self._interest = list(env.parsed_problem.get("obj_of_interest") or [])
        self._reader = StateReader(env)
        r = self._reader
        self._obs = ObservationBuilder(r.names, r.texts, r.fixture, self._instruction,
                                       self.config.max_entities, self.config.max_text_length)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Apply one OSC_POSE delta action (clipped to [-1, 1]) for one control period."""
        self._need_scenario()
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (ACTION_DIM,):
            raise LiberoError(f"action must have shape (7,) = (dx, dy, dz, dax, day, daz, grip), got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise LiberoError(f"action = {a.tolist()} has non-finite values")
        a = np.clip(a, -1.0, 1.0)
        _, _, done, _ = self._ctrl.step(a)
        self._steps += 1
        self._grip = float(a[6])
        self._success = bool(done)
        s = self._read()
        info = {"success": self._success, "steps": self._steps}
        truncated = self._steps >= self.max_steps
        return self._obs.build(s), (1.0 if self._success else 0.0), self._success, truncated, info  # type: ignore[union-attr]

    # ---- state ----------------------------------------------------------------------------------

    def _read(self) -> LiberoState:
        assert self._reader is not None
        self._state = self._reader.read(self._grip, self._success, self._steps)
        return self._state

    def state(self) -> LiberoState:
        """The privileged state now (object poses and boxes, end effector, gripper, contacts, success)."""
        self._need_scenario()
        return self._state if self._state is not None else self._read()

    def observation(self) -> dict[str, Any]:
        """The observation of the current state (as `step` returns it)."""
        return self._obs.build(self.state())  # type: ignore[union-attr]

    @property
    def goal(self) -> list[list[str]]:
        """The BDDL goal as atomic predicates, e.g. [["in", "alphabet_soup_1", "basket_1_contain_region"]]."""
        self._need_scenario()
        return [list(g) for g in self._goal]

    @property
    def objects_of_interest(self) -> list[str]:
        """The BDDL `obj_of_interest` names (the task's target and receptacle; privileged)."""
        self._need_scenario()
        return list(self._interest)

    def predicates(self) -> dict[str, bool]:
        """Each BDDL goal predicate (LIBERO's `_eval_predicate`), e.g. "in(alphabet_soup_1,basket_1_contain_region)",
        plus "grasped(x)" (both fingers touch x) and "contact(gripper,x)" for each entity of interest."""
        env = self.control_env.env
        out = {f"{g[0]}({','.join(g[1:])})": bool(env._eval_predicate(g)) for g in self._goal}
        s = self.state()
        touched = s.left_touch | s.right_touch
        for name in self._interest:
            if name in s.names:
                out[f"grasped({name})"] = name in s.grasped
                out[f"contact(gripper,{name})"] = name in touched
        return out

    def get_state(self) -> LiberoSnapshot:
        """A snapshot from which the episode goes on exactly as from here (`LiberoSnapshot`)."""
        env = self._ctrl.env
        return LiberoSnapshot(self.scenario, np.asarray(self._ctrl.get_sim_state()).copy(), self._steps, self._grip,
                              tuple(np.array(g.current_action, copy=True) for g in self._grippers()),
                              np.array(env.sim.data.qacc_warmstart, copy=True), self.state())

    def _grippers(self) -> list[Any]:
        return [g for r in self._ctrl.env.robots if (g := getattr(r, "gripper", None)) is not None
                and hasattr(g, "current_action")]

    def set_state(self, snapshot: LiberoSnapshot) -> dict[str, Any]:
        """Restore a snapshot (loading its scenario first if another is active); returns the observation."""
        if not isinstance(snapshot, LiberoSnapshot):
            raise LiberoError(f"set_state needs a LiberoSnapshot, got {type(snapshot).__name__}")
        if self._scenario != snapshot.scenario:
            self.reset_to(snapshot.scenario)
        size = len(self._ctrl.get_sim_state())
        if snapshot.physics.shape != (size,):
            raise LiberoError(f"snapshot physics has shape {snapshot.physics.shape}, this scene needs ({size},)")
        self._ctrl.set_init_state(snapshot.physics)
        for g, a in zip(self._grippers(), snapshot.fingers):
            g.current_action = np.array(a, copy=True)
        self._ctrl.env.sim.data.qacc_warmstart[:] = snapshot.warmstart
        self._steps, self._grip = snapshot.steps, snapshot.grip_cmd
        self._state, self._success = snapshot.state, snapshot.state.success
        return self._obs.build(self._state)  # type: ignore[union-attr]

    # ---- rendering ------------------------------------------------------------------------------

    def render(self, camera: str = "agentview", size: int | None = None) -> np.ndarray:  # type: ignore[override]
        """An RGB keyframe (uint8, size x size x 3) from `camera`: "agentview" ("front") or
        "robot0_eye_in_hand" ("wrist"). Shadows, reflections and skybox are off (much faster on a CPU)."""
        self._need_scenario()
        if camera not in CAMERAS:
            raise LiberoError(f"camera = {camera!r} is not known; available: {sorted(CAMERAS)}")
        px = int(size or self.config.render_size)
        m, d = self._ctrl.env.sim.model._model, self._ctrl.env.sim.data._data
        if not 16 <= px <= min(m.vis.global_.offwidth, m.vis.global_.offheight):
            raise LiberoError(
                f"render size = {px} must be in [16, {min(m.vis.global_.offwidth, m.vis.global_.offheight)}] pixels"
            )
        r = self._renderers.get(px)
        if r is None:
            r = self._renderers[px] = mujoco.Renderer(m, px, px)
            for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION, mujoco.mjtRndFlag.mjRND_SKYBOX):
                r.scene.flags[flag] = 0
        r.update_scene(d, camera=CAMERAS[camera])
        return r.render().copy()

    # ---- cleanup --------------------------------------------------------------------------------

    def _close_sim(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()
        if self._ctrl is not None:
            self._ctrl.close()
        self._ctrl, self._bddl, self._reader, self._obs, self._state = None, None, None, None, None
        self._scenario = None

    def close(self) -> None:
        """Release the renderers, the simulator and the temporary BDDL directory."""
        self._close_sim()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
