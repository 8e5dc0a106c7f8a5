"""The built-in tabletop backend: MuJoCo scenes built from `ScenarioSpec`s, privileged state and
predicates, a gymnasium environment, scripted experts, keyframe rendering and validity checks."""

from coda.sim.tabletop import _gl  # noqa: F401  (must run before mujoco is imported)
from coda.sim.tabletop.builder import BuildError, BuiltScene, SceneIndex, build_model, build_scene

__all__ = ["BuildError", "BuiltScene", "SceneIndex", "build_model", "build_scene"]
