"""The built-in tabletop backend: MuJoCo scenes built from `ScenarioSpec`s, privileged state and
predicates, a gymnasium environment, scripted experts, keyframe rendering and validity checks.

Public API (see each module for details):

- `build_model(spec, config=None) -> mujoco.MjModel`, `build_scene(...) -> BuiltScene`   (builder)
- `TabletopEnv(spec=None, config=None, *, sampler=None, render_mode=None)`                  (env)
- `TabletopState` and the predicates `grasped`, `lifted`, `on`, `inside`, `at_region`,
  `drawer_fraction`, distances, `goal_satisfied(state, spec)`                               (predicates)
- `expert_for(spec, horizon=8) -> Expert`, `Expert.act(state) -> (H, 5)`,
  `rollout_expert(env, spec, max_steps=None) -> ExpertEpisode`                              (experts)
- `render_png(spec, path, camera="front", size=256)`                                        (render)
- `check_validity(spec, *, expert=True, settle_s=0.5, penetration_tol=0.004) -> ValidityResult` (validity)
- `reference_scene(family, rng) -> ScenarioSpec`: seeded sensible scenes for checks and benchmarks
"""

from coda.sim.tabletop import _gl  # noqa: F401  (must run before mujoco is imported)
from coda.sim.tabletop import predicates
from coda.sim.tabletop.builder import BuildError, BuiltScene, SceneIndex, build_model, build_scene
from coda.sim.tabletop.env import EnvError, SimSnapshot, TabletopEnv
from coda.sim.tabletop.experts import Expert, ExpertEpisode, ExpertError, expert_for, rollout_expert
from coda.sim.tabletop.observation import ObservationError
from coda.sim.tabletop.predicates import TabletopState, goal_satisfied
from coda.sim.tabletop.reference import reference_scene
from coda.sim.tabletop.render import RenderError, render_png
from coda.sim.tabletop.validity import ValidityResult, check_validity

__all__ = [
    "BuildError", "BuiltScene", "EnvError", "Expert", "ExpertEpisode", "ExpertError", "ObservationError",
    "RenderError", "SceneIndex", "SimSnapshot", "TabletopEnv", "TabletopState", "ValidityResult", "build_model",
    "build_scene", "check_validity", "expert_for", "goal_satisfied", "predicates", "reference_scene",
    "render_png", "rollout_expert",
]
