"""Geometric feasibility of a scene's layout, before any physics: overlaps, table edges, blocked paths.

`layout_problems(spec)` is a cheap, pure pre-check that generators and operators use to reject a layout
early (the simulator's `check_validity` remains the judge). It reports:

- an entity whose footprint leaves the table (with margin);
- two entities closer than `MIN_GAP` (fingers need room around a grasped object);
- a push whose straight path — from behind the object to the goal region's centre — is blocked or
  leaves the workspace;
- a goal already satisfied at the start (push object inside its region).
"""

from __future__ import annotations

import math

from coda.scene.regions import Footprint, footprint, inside_table
from coda.scene.spec import ObjectSpec, RegionSpec, ScenarioSpec

MIN_GAP = 0.02  # smallest allowed gap between two footprints, metres
PUSH_APPROACH = 0.06  # room behind a pushed object for the gripper, metres


def footprints(spec: ScenarioSpec) -> dict[str, Footprint]:
    """Footprint of every entity resting on the table (objects stacked on others are skipped)."""
    out: dict[str, Footprint] = {}
    for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions):
        if isinstance(e, ObjectSpec) and e.on is not None:
            continue
        out[e.name] = footprint(e)
    return out


def push_corridor(obj: ObjectSpec, region: RegionSpec) -> Footprint:
    """The strip the object and the pushing gripper sweep from behind the object to the region's centre."""
    dx, dy = region.center[0] - obj.pos[0], region.center[1] - obj.pos[1]
    dist = math.hypot(dx, dy)
    yaw = math.atan2(dy, dx)
    r = max(obj.size[0], obj.size[1])  # conservative half width across the path
    back = r + PUSH_APPROACH
    length = dist + back
    mid = dist / 2 - back / 2  # centre of the strip along the direction, measured from the object
    cx, cy = obj.pos[0] + mid * math.cos(yaw), obj.pos[1] + mid * math.sin(yaw)
    return Footprint(cx, cy, length / 2, r, yaw)


def corridors(spec: ScenarioSpec) -> list[tuple[tuple[str, ...], Footprint]]:
    """Paths that must stay free, each with the entity names allowed inside it."""
    out = []
    for g in spec.goal:
        if g.name == "at_region":
            obj, reg = spec.entity(g.args[0]), spec.entity(g.args[1])
            if isinstance(obj, ObjectSpec) and isinstance(reg, RegionSpec):
                out.append(((obj.name, reg.name), push_corridor(obj, reg)))
    return out


def layout_problems(spec: ScenarioSpec, *, min_gap: float = MIN_GAP) -> list[str]:
    """Every geometric problem of the layout, one short sentence each (empty = looks feasible)."""
    fps = footprints(spec)
    problems = [f"'{n}' leaves the table" for n, fp in fps.items() if not inside_table(fp)]
    names = list(fps)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if fps[a].conflicts(fps[b], min_gap):
                problems.append(f"'{a}' and '{b}' are closer than {min_gap} m")
    for allowed, strip in corridors(spec):
        if not inside_table(strip, margin=0.0):  # the gripper must reach the push start behind the object
            problems.append(f"the push path of '{allowed[0]}' leaves the workspace")
        for n, fp in fps.items():
            if n not in allowed and isinstance(spec.entity(n), ObjectSpec) and strip.conflicts(fp, 0.01):
                problems.append(f"'{n}' blocks the push path of '{allowed[0]}'")
    for g in spec.goal:
        if g.name == "at_region":
            obj, reg = spec.entity(g.args[0]), spec.entity(g.args[1])
            if isinstance(obj, ObjectSpec) and isinstance(reg, RegionSpec):
                if abs(obj.pos[0] - reg.center[0]) <= reg.half[0] and abs(obj.pos[1] - reg.center[1]) <= reg.half[1]:
                    problems.append(f"'{obj.name}' already lies in region '{reg.name}'")
    return problems


GRASP_WIDTH = (0.03, 0.06)  # graspable: full width across the narrow side, metres
PUSH_MIN_HALF = 0.05  # push objects are at least 10 cm wide (too wide to grasp)


def _narrow_half(obj: ObjectSpec) -> float:
    return min(obj.size[0], obj.size[1])


def goal_problems(spec: ScenarioSpec) -> list[str]:
    """Goal objects that break the families' physical conventions (graspable, fits, wide enough to push)."""
    out = []
    for g in spec.goal:
        if g.name == "in":
            obj, cont = spec.entity(g.args[0]), spec.entity(g.args[1])
            if isinstance(obj, ObjectSpec):
                w = 2 * _narrow_half(obj)
                if not GRASP_WIDTH[0] - 1e-9 <= w <= GRASP_WIDTH[1] + 1e-9:
                    out.append(f"'{obj.name}' is {w:.3f} m wide, not graspable {GRASP_WIDTH}")
                inner = min(cont.size[0], cont.size[1]) if hasattr(cont, "size") else 0.0  # type: ignore[union-attr]
                if max(obj.size[0], obj.size[1]) > inner - 0.005:
                    out.append(f"'{obj.name}' does not fit in '{cont.name}'")
        elif g.name == "on":
            top, bottom = spec.entity(g.args[0]), spec.entity(g.args[1])
            if isinstance(top, ObjectSpec) and isinstance(bottom, ObjectSpec):
                if top.shape != "box" or bottom.shape != "box":
                    out.append(f"stacking needs two boxes, got {top.shape} on {bottom.shape}")
                w = 2 * _narrow_half(top)
                if not GRASP_WIDTH[0] - 1e-9 <= w <= GRASP_WIDTH[1] + 1e-9:
                    out.append(f"'{top.name}' is {w:.3f} m wide, not graspable {GRASP_WIDTH}")
                if max(top.size[0], top.size[1]) > _narrow_half(bottom) + 0.005:
                    out.append(f"'{top.name}' is wider than '{bottom.name}' it should rest on")
        elif g.name == "at_region":
            obj = spec.entity(g.args[0])
            if isinstance(obj, ObjectSpec) and _narrow_half(obj) < PUSH_MIN_HALF - 1e-9:
                out.append(f"'{obj.name}' is narrower than {2 * PUSH_MIN_HALF} m: push objects must be too wide to grasp")
    return out


def problems(spec: ScenarioSpec) -> list[str]:
    """Layout and goal problems together (empty = the scene passes the cheap pre-check)."""
    return layout_problems(spec) + goal_problems(spec)
