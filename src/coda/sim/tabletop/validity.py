"""Physical validity of a scenario: it builds, nothing interpenetrates, it settles, it is reachable, the goal
is possible and not already met, and (optionally) the scripted expert solves it.

`check_validity` never raises on a bad scene; it returns the first failed check as a named reason:

| reason                   | meaning                                                                      |
| ------------------------ | ---------------------------------------------------------------------------- |
| compile_error            | the scene cannot be built or compiled                                        |
| unobservable             | too many entities or text outside the observation's charset/length           |
| out_of_workspace         | an entity's centre lies outside the workspace |x|, |y| <= 0.30 m             |
| off_table                | a footprint reaches past the table edge, or an object fell off while settling |
| impossible_goal          | the goal cannot hold (wrong entity kinds, object too large for the container, |
|                          | object too wide to grasp, drawer value out of range ...)                     |
| interpenetration         | two bodies overlap (at the start, or by more than the tolerance after settling)|
| unsettled                | an object still moves, or moved far, after `settle_s` seconds                 |
| goal_already_satisfied   | the goal already holds once the scene has settled                            |
| unreachable              | the gripper cannot get where the task needs it (outside the action box)       |
| expert_failed            | the scripted expert did not reach the goal within the step limit             |
| check_error              | the check itself failed unexpectedly (details carry the error)                |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.scene import geometry as G
from coda.scene.spec import WORKSPACE, ContainerSpec, RegionSpec, ScenarioSpec
from coda.sim.config import SimConfig

REASONS = (
    "compile_error", "unobservable", "out_of_workspace", "off_table", "impossible_goal", "interpenetration",
    "unsettled", "goal_already_satisfied", "unreachable", "expert_failed", "check_error",
)
SETTLE_SPEED = 0.02  # m/s: an object moving faster than this after settling is unsettled
SETTLE_SPIN = 0.5  # rad/s
SETTLE_DRIFT = 0.02  # m: an object that moved farther than this while settling is unsettled


@dataclass(frozen=True)
class ValidityResult:
    """Outcome of `check_validity`: valid, or the first failed check's reason (see REASONS) and details."""

    valid: bool
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _bad(reason: str, **details: Any) -> ValidityResult:
    return ValidityResult(False, reason, details)


def _in_box(x: float, y: float, margin: float = 0.0) -> bool:
    return WORKSPACE[0] - margin <= x <= WORKSPACE[1] + margin and WORKSPACE[2] - margin <= y <= WORKSPACE[3] + margin


def _center(e: Any) -> tuple[float, float]:
    return e.center if isinstance(e, RegionSpec) else e.pos


def _rects_overlap(a: G.Footprint, b: G.Footprint) -> bool:
    """Separating-axis test between two oriented rectangles."""
    ca, cb = a.corners(), b.corners()
    for fp in (a, b):
        for ang in (fp.yaw, fp.yaw + math.pi / 2):
            ax = (math.cos(ang), math.sin(ang))
            pa = [p[0] * ax[0] + p[1] * ax[1] for p in ca]
            pb = [p[0] * ax[0] + p[1] * ax[1] for p in cb]
            if max(pa) <= min(pb) or max(pb) <= min(pa):
                return False
    return True


def _static_checks(spec: ScenarioSpec) -> ValidityResult | None:
    ents: tuple[G.Entity, ...] = (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)
    for e in ents:
        x, y = _center(e)
        if not _in_box(x, y):
            return _bad("out_of_workspace", entity=e.name, pos=(x, y), workspace=WORKSPACE)
    edge = G.TABLE_HALF[0]
    for e in ents:
        for cx, cy in G.footprint(e).corners():
            if abs(cx) > edge or abs(cy) > G.TABLE_HALF[1]:
                return _bad("off_table", entity=e.name, corner=(round(cx, 3), round(cy, 3)), table_half=G.TABLE_HALF[:2])
    fixtures: list[G.Entity] = [*spec.containers, *spec.drawers]
    for i, a in enumerate(fixtures):  # fixed bodies never collide in MuJoCo: compare footprints instead
        for b in fixtures[i + 1:]:
            if _rects_overlap(G.footprint(a), G.footprint(b)):
                return _bad("interpenetration", pair=(a.name, b.name), when="start", depth=None)
    return _goal_checks(spec)


def _goal_checks(spec: ScenarioSpec) -> ValidityResult | None:
    kinds: dict[str, str] = {}
    for k, group in (("object", spec.objects), ("container", spec.containers), ("drawer", spec.drawers), ("region", spec.regions)):
        for e in group:
            kinds[e.name] = k
    want = {"in": ("object", "container"), "on": ("object", "object"), "at_region": ("object", "region"), "drawer_fraction": ("drawer",)}
    for g in spec.goal:
        got = tuple(kinds[a] for a in g.args)
        text = f"{g.name}({', '.join(g.args)})"
        if got != want[g.name]:
            return _bad("impossible_goal", goal=text, why=f"needs kinds {want[g.name]}, got {got}")
        if g.name in ("in", "on"):
            obj = spec.object(g.args[0])
            if not G.graspable(obj):
                return _bad("impossible_goal", goal=text, why=f"'{obj.name}' is {G.min_horizontal_width(obj):.3f} m wide, "
                            f"wider than the jaws can grasp ({G.MAX_OPENING - 0.01:.3f} m)")
        if g.name == "in":
            obj, cont = spec.object(g.args[0]), spec.entity(g.args[1])
            assert isinstance(cont, ContainerSpec)
            oh = sorted(G.object_half_xy(obj))
            ch = sorted(cont.size[:2])
            fits = math.hypot(*oh) <= ch[0] if cont.kind == "bowl" else (oh[0] <= ch[0] and oh[1] <= ch[1])
            if not fits:
                return _bad("impossible_goal", goal=text, why=f"'{obj.name}' (half extents {tuple(round(v, 3) for v in oh)}) "
                            f"does not fit in '{cont.name}' (inner half extents {tuple(round(v, 3) for v in ch)})")
        if g.name == "on":
            top, base = spec.object(g.args[0]), spec.object(g.args[1])
            if base.shape == "sphere":
                return _bad("impossible_goal", goal=text, why=f"'{base.name}' is a sphere: nothing rests on it")
            if top.name == base.name:
                return _bad("impossible_goal", goal=text, why="an object cannot rest on itself")
        if g.name == "drawer_fraction":
            assert g.value is not None and g.tol is not None
            if g.value + g.tol < 0 or g.value - g.tol > 1:
                return _bad("impossible_goal", goal=f"{text} = {g.value} +- {g.tol}", why="the range lies outside [0, 1]")
    return None


def _reach_checks(spec: ScenarioSpec, s: Any) -> ValidityResult | None:
    from coda.sim.tabletop import experts as X
    from coda.sim.tabletop import predicates as P

    lo, hi = G.ACTION_LOW, G.ACTION_HIGH
    rx, ry, rz = spec.robot.pos
    if not (lo[0] <= rx <= hi[0] and lo[1] <= ry <= hi[1] and lo[2] <= rz <= hi[2]):
        return _bad("unreachable", what="robot start pose", pos=spec.robot.pos)

    def need(what: str, x: float, y: float, z: float | None = None) -> ValidityResult | None:
        if not (lo[0] <= x <= hi[0] and lo[1] <= y <= hi[1]) or (z is not None and not lo[2] <= z <= hi[2]):
            pos = tuple(round(float(c), 3) for c in ((x, y) if z is None else (x, y, z)))
            return _bad("unreachable", what=what, pos=pos)
        return None

    for g in spec.goal:
        if g.name in ("in", "on"):
            o, t = g.args
            i, j = s.row(o), s.row(t)
            bad = need(f"grasp of '{o}'", s.pos[i, 0], s.pos[i, 1], X.grasp_z(s, o)) or need(f"place over '{t}'", s.pos[j, 0], s.pos[j, 1])
        elif g.name == "at_region":
            o, r = g.args
            i, j = s.row(o), s.row(r)
            d = s.pos[j, :2] - s.pos[i, :2]
            d = d / max(float(np.linalg.norm(d)), 1e-9)
            pre = s.pos[i, :2] - d * (X.fork_contact(s, o, d) + 0.03)
            bad = need(f"push start behind '{o}'", pre[0], pre[1]) or need(f"region '{r}'", s.pos[j, 0], s.pos[j, 1])
        else:
            k = s.row(g.args[0])
            assert g.value is not None
            v = min(max(g.value, 0.0), 1.0)
            h = s.pos[k] + s.axis[k] * (v - P.drawer_fraction(s, g.args[0])) * s.travel[k]
            bad = need(f"handle of '{g.args[0]}' now", *s.pos[k]) or need(f"handle of '{g.args[0]}' at {v:.2f}", *h)
        if bad is not None:
            return bad
    return None


def _penetration(env: Any, tol: float) -> tuple[str, str, float] | None:
    """The deepest contact between different bodies deeper than `tol`, as (entity, entity, depth)."""
    d, idx = env.data, env.scene.index
    m = env.model
    names = idx.contact_names
    worst: tuple[str, str, float] | None = None
    for k in range(d.ncon):
        c = d.contact[k]
        if c.dist >= -tol:
            continue
        e1, e2 = int(idx.geom_entity[c.geom1]), int(idx.geom_entity[c.geom2])
        n1 = names[e1] if e1 >= 0 else "gripper"
        n2 = names[e2] if e2 >= 0 else "gripper"
        if n1 == n2 or (int(m.geom_bodyid[c.geom1]) == int(m.geom_bodyid[c.geom2])):
            continue
        if worst is None or -c.dist > worst[2]:
            worst = (n1, n2, round(-float(c.dist), 4))
    return worst


def check_validity(
    spec: ScenarioSpec,
    *,
    expert: bool = True,
    settle_s: float = 0.5,
    penetration_tol: float = 0.004,
    config: SimConfig | None = None,
    max_steps: int | None = None,
) -> ValidityResult:
    """Check that `spec` is a physically valid, solvable scene (see the module docstring for the reasons).

    Args:
        spec: the scenario.
        expert: also require the scripted expert to solve it.
        settle_s: seconds the scene settles (gripper held at its start pose) before the settle checks.
        penetration_tol: overlap (m) allowed between bodies at the start and after settling.
        config: simulator settings (defaults to `SimConfig()`).
        max_steps: step limit for the expert (defaults to `config.max_steps`).
    Returns:
        A `ValidityResult`; never raises on a bad scene.
    """
    try:
        return _check(spec, expert, settle_s, penetration_tol, config or SimConfig(), max_steps)
    except Exception as e:  # a validity check reports, it does not crash the generator loop
        return _bad("check_error", error=f"{type(e).__name__}: {e}")


def _check(spec: ScenarioSpec, expert: bool, settle_s: float, tol: float, cfg: SimConfig, max_steps: int | None) -> ValidityResult:
    from coda.sim.tabletop.builder import BuildError
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for, rollout_expert
    from coda.sim.tabletop.observation import ObservationError
    from coda.sim.tabletop.predicates import goal_satisfied

    bad = _static_checks(spec)
    if bad is not None:
        return bad
    env = TabletopEnv(config=cfg.model_copy(update={"settle_steps": 0}))
    try:
        try:
            env.reset_to(spec)
        except BuildError as e:
            return _bad("compile_error", error=str(e))
        except ObservationError as e:
            return _bad("unobservable", error=str(e))
        worst = _penetration(env, tol)
        if worst is not None:
            return _bad("interpenetration", pair=worst[:2], depth=worst[2], when="start")
        s0 = env.state()
        hold = np.array([*spec.robot.pos, spec.robot.yaw, spec.robot.grip], dtype=np.float32)
        for _ in range(max(1, int(round(settle_s * cfg.control_hz)))):
            env.step(hold)
        s = env.state()
        objs = [i for i, k in enumerate(s.kinds) if k == "object"]
        for i in objs:
            x, y, z = s.pos[i]
            if z < -0.01 or abs(x) > G.TABLE_HALF[0] or abs(y) > G.TABLE_HALF[1]:
                return _bad("off_table", entity=s.names[i], pos=(round(float(x), 3), round(float(y), 3), round(float(z), 3)))
        worst = _penetration(env, tol)
        if worst is not None:
            return _bad("interpenetration", pair=worst[:2], depth=worst[2], when="settled")
        d, idx = env.data, env.scene.index
        for k, i in enumerate(objs):
            v = d.qvel[idx.obj_qvel[k]: idx.obj_qvel[k] + 6]
            drift = float(np.linalg.norm(s.pos[i] - s0.pos[i]))
            speed, spin = float(np.linalg.norm(v[:3])), float(np.linalg.norm(v[3:]))
            if speed > SETTLE_SPEED or spin > SETTLE_SPIN or drift > SETTLE_DRIFT:
                return _bad("unsettled", entity=s.names[i], speed=round(speed, 4), spin=round(spin, 3), drift=round(drift, 4))
        if goal_satisfied(s, spec):
            return _bad("goal_already_satisfied", goal=[g.name for g in spec.goal])
        bad = _reach_checks(spec, s)
        if bad is not None:
            return bad
        if expert:
            run_env = TabletopEnv(config=cfg)  # the expert runs the episode exactly as it will be run
            try:
                ep = rollout_expert(run_env, spec, max_steps, record=False)
                last = run_env.state()
            finally:
                run_env.close()
            if not ep.success:
                return _bad("expert_failed", steps=ep.length, phase=expert_for(spec).phase(last))
            return ValidityResult(True, None, {"expert_steps": ep.length})
        return ValidityResult(True, None, {})
    finally:
        env.close()


def sim_check(spec: ScenarioSpec, expert: bool = True) -> tuple[bool, str, dict[str, Any]]:
    """`check_validity` as (valid, reason, details): the check `coda.scene.splits.build_split` takes."""
    r = check_validity(spec, expert=expert)
    return bool(r.valid), r.reason or "", dict(r.details or {})
