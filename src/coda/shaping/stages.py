"""Registered stage kinds: each is a predicate on the state and a progress measure in [0, 1].

They are written over the simulator's own predicate functions (a backend's `predicates`,
`coda.sim.backends`: the tabletop's module, or LIBERO's `LiberoPredicates` of an episode: `grasped`,
`lifted`, `inside`, `on`, `at_region`, `drawer_fraction`, distances, `half_width`, `floor`, `top`, `bottom`, `grip_closed`), the same functions the
scripted experts and the success check use. Everything here reads only the current state.

Predicates are *cumulative*: a later stage holding implies the task has got that far (`lift` requires the
object held and raised; `carry` requires it held over the target; `place` requires it released inside/on
the target), so the furthest stage whose predicate holds counts the stages done in order.

Progress measures (the stage being worked on, i.e. the one after the furthest that holds):

| kind  | progress                                                                             |
| ----- | ------------------------------------------------------------------------------------ |
| reach | 1 − d / 0.6 m, d = gripper–entity distance (drawer: its handle)                      |
| grasp | half closeness of the gripper to the object's centre, half finger closing            |
| lift  | height of the object's bottom / lift height (0 unless held)                          |
| carry | 1 − d / 0.6 m, d = horizontal object–target distance                                 |
| place | 1 − (bottom − target surface) / 0.15 m while held over the target                    |
| push  | 1 − d / 0.6 m, d = horizontal object–region distance                                 |
| open  | 1 − |fraction − value| / value                                                       |
| close | 1 − fraction                                                                         |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coda.registry import Registry
from coda.scene.spec import ScenarioSpec, entity_kinds
from coda.shaping.program import DEFAULT_LIFT, Stage

REACH_MARGIN = 0.03  # the gripper "is at" an object within its largest half width plus this, m
HANDLE_REACH = 0.04  # the gripper "is at" a drawer handle within this distance, m
DIST_SCALE = 0.6  # distance at which reach/carry/push progress is 0 (about the workspace size), m
PLACE_DROP = 0.15  # height above the target surface at which place progress is 0, m
OVER_FRACTION = 0.6  # "over" a target = within this fraction of its smaller half width
DEFAULT_DRAWER_TOL = 0.1  # drawer fraction tolerance when the scene's goal does not give one


@dataclass(frozen=True)
class StageContext:
    """What a stage needs besides the state: the predicate functions and scene constants."""

    P: Any  # the predicate module (or an object with the same functions)
    kinds: dict[str, str]  # entity name -> object | container | drawer | region
    drawer_tol: dict[str, float] = field(default_factory=dict)  # per drawer, from the scene's goal


@dataclass(frozen=True)
class StageKind:
    """A registered stage kind."""

    holds: Callable[[Any, Stage, StageContext], bool]
    progress: Callable[[Any, Stage, StageContext], float]
    doc: str


STAGES: Registry[StageKind] = Registry("stage kind")


def _clip(x: float) -> float:
    return 0.0 if x < 0.0 else (1.0 if x > 1.0 else float(x))


def _reach_tol(s: Any, name: str, c: StageContext) -> float:
    if c.kinds[name] == "drawer":
        return HANDLE_REACH
    return float(max(c.P.half_width(s, name))) + REACH_MARGIN


def _over_tol(s: Any, target: str, c: StageContext) -> float:
    return OVER_FRACTION * float(min(c.P.half_width(s, target)))


def _surface(s: Any, target: str, c: StageContext) -> float:
    k = c.kinds[target]
    if k == "container":
        return float(c.P.floor(s, target))
    if k == "object":
        return float(c.P.top(s, target))
    return 0.0


# ---- reach -------------------------------------------------------------------------------------------


def _reach_holds(s: Any, st: Stage, c: StageContext) -> bool:
    (e,) = st.args
    if c.kinds[e] in ("object", "drawer") and c.P.grasped(s, e):
        return True
    return bool(c.P.gripper_distance(s, e) <= _reach_tol(s, e, c))


def _reach_progress(s: Any, st: Stage, c: StageContext) -> float:
    return _clip(1.0 - c.P.gripper_distance(s, st.args[0]) / DIST_SCALE)


# ---- grasp / lift ------------------------------------------------------------------------------------


def _grasp_holds(s: Any, st: Stage, c: StageContext) -> bool:
    return bool(c.P.grasped(s, st.args[0]))


def _grasp_progress(s: Any, st: Stage, c: StageContext) -> float:
    o = st.args[0]
    near = _clip(1.0 - c.P.gripper_distance(s, o) / _reach_tol(s, o, c))
    closing = _clip(float(c.P.grip_closed(s)))  # 0 open .. 1 closed
    return 0.5 * near + 0.5 * closing


def _lift_height(st: Stage) -> float:
    return DEFAULT_LIFT if st.value is None else float(st.value)


def _lift_holds(s: Any, st: Stage, c: StageContext) -> bool:
    return bool(c.P.lifted(s, st.args[0], _lift_height(st)))


def _lift_progress(s: Any, st: Stage, c: StageContext) -> float:
    o = st.args[0]
    if not c.P.grasped(s, o):
        return 0.0
    return _clip(c.P.bottom(s, o) / _lift_height(st))


# ---- carry / place / push ----------------------------------------------------------------------------


def _carry_holds(s: Any, st: Stage, c: StageContext) -> bool:
    o, t = st.args
    return bool(c.P.grasped(s, o) and c.P.xy_distance(s, o, t) <= _over_tol(s, t, c))


def _carry_progress(s: Any, st: Stage, c: StageContext) -> float:
    o, t = st.args
    if not c.P.grasped(s, o):
        return 0.0
    return _clip(1.0 - c.P.xy_distance(s, o, t) / DIST_SCALE)


def _rests(s: Any, o: str, t: str, c: StageContext) -> bool:
    k = c.kinds[t]
    if k == "container":
        return bool(c.P.inside(s, o, t))
    if k == "object":
        return bool(c.P.on(s, o, t))
    return bool(c.P.at_region(s, o, t))


def _place_holds(s: Any, st: Stage, c: StageContext) -> bool:
    o, t = st.args
    return _rests(s, o, t, c) and not c.P.grasped(s, o)


def _place_progress(s: Any, st: Stage, c: StageContext) -> float:
    o, t = st.args
    if not c.P.grasped(s, o):
        return 0.0
    return _clip(1.0 - (c.P.bottom(s, o) - _surface(s, t, c)) / PLACE_DROP)


def _push_holds(s: Any, st: Stage, c: StageContext) -> bool:
    return _rests(s, st.args[0], st.args[1], c)


def _push_progress(s: Any, st: Stage, c: StageContext) -> float:
    return _clip(1.0 - c.P.xy_distance(s, st.args[0], st.args[1]) / DIST_SCALE)


# ---- drawers -----------------------------------------------------------------------------------------


def _open_value(st: Stage) -> float:
    return 1.0 if st.value is None else float(st.value)


def _open_holds(s: Any, st: Stage, c: StageContext) -> bool:
    d = st.args[0]
    return bool(abs(c.P.drawer_fraction(s, d) - _open_value(st)) <= c.drawer_tol.get(d, DEFAULT_DRAWER_TOL))


def _open_progress(s: Any, st: Stage, c: StageContext) -> float:
    v = _open_value(st)
    return _clip(1.0 - abs(c.P.drawer_fraction(s, st.args[0]) - v) / v)


def _close_holds(s: Any, st: Stage, c: StageContext) -> bool:
    d = st.args[0]
    return bool(c.P.drawer_fraction(s, d) <= c.drawer_tol.get(d, DEFAULT_DRAWER_TOL))


def _close_progress(s: Any, st: Stage, c: StageContext) -> float:
    return _clip(1.0 - c.P.drawer_fraction(s, st.args[0]))


STAGES.register("reach", StageKind(_reach_holds, _reach_progress, "the gripper is at the entity"))
STAGES.register("grasp", StageKind(_grasp_holds, _grasp_progress, "the object is grasped"))
STAGES.register("lift", StageKind(_lift_holds, _lift_progress, "the object is held and raised"))
STAGES.register("carry", StageKind(_carry_holds, _carry_progress, "the object is held over the target"))
STAGES.register("place", StageKind(_place_holds, _place_progress, "the object rests, released, in/on the target"))
STAGES.register("push", StageKind(_push_holds, _push_progress, "the object is in the region"))
STAGES.register("open", StageKind(_open_holds, _open_progress, "the drawer is open to the value"))
STAGES.register("close", StageKind(_close_holds, _close_progress, "the drawer is closed"))


def default_predicates(spec: Any = None) -> Any:
    """The default simulator backend's predicates for `spec` (`coda.sim.backends`; imported lazily: a
    simulator's predicates import it)."""
    from coda.sim.backends import sim_backend

    return sim_backend().predicates(spec)


def make_context(spec: ScenarioSpec | None, predicates: Any = None, kinds: dict[str, str] | None = None) -> StageContext:
    """A StageContext for a scene (`spec`), or for another backend's scene given its entity `kinds`;
    `predicates` defaults to the default simulator backend's."""
    P = predicates if predicates is not None else default_predicates(spec)
    if spec is None:
        if kinds is None:
            raise ValueError("make_context needs a ScenarioSpec or the scene's entity kinds")
        return StageContext(P=P, kinds=dict(kinds))
    tol = {g.args[0]: float(g.tol) for g in spec.goal if g.name == "drawer_fraction" and g.tol is not None}
    return StageContext(P=P, kinds=entity_kinds(spec), drawer_tol=tol)
