"""Privileged tabletop state and the predicates over it.

`TabletopState` is a cheap, immutable snapshot of what the simulator knows: the gripper, what each finger
touches, and per-entity poses and sizes. The functions below are pure functions of a state; experts,
success checks, critics and potentials all use these same functions, so "success" means one thing.

Entity rows follow the spec's order: objects, containers, drawers, regions. Per kind, `pos` is:
object centre; container floor centre (top face of its floor); drawer handle centre; region centre (z 0).
`size` is the spec's half extents (containers: inner half extents and wall half-height; drawers: the
cabinet's half extents; regions: (hx, hy, 0)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from coda.errors import CodaError
from coda.scene import geometry as G
from coda.scene.spec import GoalPredicate, ScenarioSpec

ON_TOL = 0.012  # |bottom of top - top of base| allowed for `on`, m
RIM_SLACK = 0.005  # an object counts as inside a container while its bottom is below rim + this, m
MIN_HOLD_GAP = 0.004  # jaws closed tighter than this hold nothing (they press on it from outside), m


class PredicateError(CodaError, KeyError):
    """A predicate names an entity the state does not have, or one of the wrong kind."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, eq=False)
class TabletopState:
    """Privileged state of a tabletop scene at one instant (arrays are private copies).

    Poses are those of the current physics state; finger contacts are those found by the last collision
    pass (at most one physics substep, 2 ms, old; exact after `reset` and `set_state`).
    """

    time: float  # simulated seconds since reset
    gripper_pos: np.ndarray  # (3,) TCP position, m
    gripper_yaw: float  # rad
    gripper_width: float  # gap between the finger pads, m
    grip_cmd: float  # last grip command, 1 open .. 0 closed
    gripper_vel: np.ndarray  # (3,) TCP linear velocity, m/s
    finger_contacts: tuple[frozenset[str], frozenset[str]]  # entity names, "table", "<drawer>/cabinet" touched
    names: tuple[str, ...]  # entity names, one per row
    kinds: tuple[str, ...]  # "object" | "container" | "drawer" | "region"
    types: tuple[str, ...]  # box, cylinder, sphere, tray, bowl, drawer, region
    pos: np.ndarray  # (N, 3) see module docstring
    rot: np.ndarray  # (N, 3, 3) rotation matrices (world from entity)
    size: np.ndarray  # (N, 3) half extents, see module docstring
    lin_vel: np.ndarray  # (N, 3) linear velocity (zero for fixed entities; drawers: the drawer's)
    fraction: np.ndarray  # (N,) drawer opening fraction (0 for other rows)
    travel: np.ndarray  # (N,) drawer travel, m (0 for other rows)
    axis: np.ndarray  # (N, 3) direction a drawer opens along (0 for other rows)
    index: dict[str, int] = field(default_factory=dict)  # name -> row

    def __post_init__(self) -> None:
        if not self.index:
            object.__setattr__(self, "index", {n: i for i, n in enumerate(self.names)})

    @classmethod
    def trusted(cls, **fields: object) -> "TabletopState":
        """Build from fields already known to be consistent (the simulator's fast path: skips __init__)."""
        s = object.__new__(cls)
        s.__dict__.update(fields)
        return s

    def row(self, name: str, kind: str | None = None) -> int:
        """Row of entity `name`. Raises PredicateError if unknown or not of `kind`."""
        i = self.index.get(name)
        if i is None:
            raise PredicateError(f"no entity named '{name}' in the state (have {list(self.names)})")
        if kind is not None and self.kinds[i] != kind:
            raise PredicateError(f"entity '{name}' is of kind '{self.kinds[i]}', expected kind '{kind}'")
        return i

    def yaw(self, name: str) -> float:
        """Heading of the entity's x axis about world z, rad."""
        r = self.rot[self.row(name)]
        return math.atan2(r[1, 0], r[0, 0])


# ---- geometry of one entity in a state -------------------------------------------------------------


def half_height(s: TabletopState, name: str) -> float:
    """Vertical half extent of an object in its current orientation (a lying cylinder is short)."""
    i = s.row(name, "object")
    a, b, c = s.size[i].tolist()
    t = s.types[i]
    if t == "sphere":
        return a
    r20, r21, r22 = s.rot[i, 2].tolist()  # how each body axis leans out of the table plane
    if t == "cylinder":
        return a * math.hypot(r20, r21) + c * abs(r22)
    return a * abs(r20) + b * abs(r21) + c * abs(r22)


def bottom(s: TabletopState, name: str) -> float:
    """Height of an object's lowest point above the table, m."""
    return float(s.pos[s.row(name), 2]) - half_height(s, name)  # row() validates the name first


def top(s: TabletopState, name: str) -> float:
    """Height of an entity's highest point above the table, m."""
    i = s.row(name)
    k = s.kinds[i]
    if k == "object":
        return float(s.pos[i, 2]) + half_height(s, name)
    if k == "container":
        return float(s.pos[i, 2] + 2 * s.size[i, 2])
    if k == "drawer":
        return 2 * G.CABINET_HALF_Z
    return 0.0


def extent_along(s: TabletopState, name: str, direction: np.ndarray) -> float:
    """Support distance of an object's footprint along a horizontal unit vector (centre to edge), m."""
    i = s.row(name, "object")
    r, (a, b, c), t = s.rot[i], s.size[i], s.types[i]
    d = np.array([direction[0], direction[1], 0.0])
    if t == "sphere":
        return float(a)
    if t == "cylinder":
        ax = r[:, 2]
        along = abs(float(d @ ax))
        return float(a * math.sqrt(max(0.0, 1.0 - along * along)) + c * along)
    return float(a * abs(d @ r[:, 0]) + b * abs(d @ r[:, 1]) + c * abs(d @ r[:, 2]))


def _local_xy(s: TabletopState, i: int, p: np.ndarray) -> tuple[float, float]:
    px, py = p[:2].tolist()
    cx, cy = s.pos[i, :2].tolist()
    (r00, r01), (r10, r11) = s.rot[i, :2, :2].tolist()
    dx, dy = px - cx, py - cy
    return r00 * dx + r10 * dy, r01 * dx + r11 * dy


# ---- predicates ------------------------------------------------------------------------------------


def touching(s: TabletopState, name: str) -> tuple[bool, bool]:
    """Whether the left and the right finger touch entity `name`."""
    s.row(name)
    return name in s.finger_contacts[0], name in s.finger_contacts[1]


def grasped(s: TabletopState, name: str) -> bool:
    """Both fingers touch the entity (an object, or a drawer's moving part) with something between the jaws
    (gap above MIN_HOLD_GAP: closed jaws pressing on a surface hold nothing)."""
    left, right = touching(s, name)
    return left and right and s.gripper_width > MIN_HOLD_GAP


def lifted(s: TabletopState, name: str, h: float = 0.03) -> bool:
    """Held in the gripper with its lowest point at least `h` metres above the table top."""
    return grasped(s, name) and bottom(s, name) >= h


def on(s: TabletopState, a: str, b: str) -> bool:
    """Object `a`'s centre is over object `b`'s top face and `a`'s bottom touches it (within ON_TOL)."""
    i, j = s.row(a, "object"), s.row(b, "object")
    if i == j:
        return False
    lx, ly = _local_xy(s, j, s.pos[i])
    if s.types[j] == "box":
        over = abs(lx) <= s.size[j, 0] and abs(ly) <= s.size[j, 1]
    else:
        over = math.hypot(lx, ly) <= s.size[j, 0]
    return bool(over and abs(bottom(s, a) - top(s, b)) <= ON_TOL)


def inside(s: TabletopState, obj: str, container: str) -> bool:
    """Object centre over the container's inner floor, bottom below the rim, centre above the floor."""
    i, j = s.row(obj, "object"), s.row(container, "container")
    lx, ly = _local_xy(s, j, s.pos[i])
    hx, hy, hz = s.size[j].tolist()
    if s.types[j] == "bowl":
        within = (lx / hx) ** 2 + (ly / hy) ** 2 <= 1.0
    else:
        within = abs(lx) <= hx and abs(ly) <= hy
    if not within:
        return False
    floor = float(s.pos[j, 2])
    return bool(float(s.pos[i, 2]) >= floor and bottom(s, obj) <= floor + 2 * hz + RIM_SLACK)


def at_region(s: TabletopState, obj: str, region: str, share: float = 1.0) -> bool:
    """Object centre lies within the region's rectangle (seen from above), or within its central `share` of
    the half extents on each axis."""
    i, j = s.row(obj, "object"), s.row(region, "region")
    d = np.abs(s.pos[i, :2] - s.pos[j, :2])
    return bool(d[0] <= share * s.size[j, 0] and d[1] <= share * s.size[j, 1])


def drawer_fraction(s: TabletopState, drawer: str) -> float:
    """Opening fraction of a drawer, 0 closed .. 1 fully open."""
    return float(s.fraction[s.row(drawer, "drawer")])


def xy_distance(s: TabletopState, a: str, b: str) -> float:
    """Horizontal distance between two entities' reference points, m."""
    return float(np.linalg.norm(s.pos[s.row(a), :2] - s.pos[s.row(b), :2]))


def gripper_distance(s: TabletopState, name: str) -> float:
    """Distance from the TCP to an entity's reference point, m (a drawer's is its handle)."""
    return float(np.linalg.norm(s.gripper_pos - s.pos[s.row(name)]))


def half_width(s: TabletopState, name: str) -> tuple[float, float]:
    """An entity's horizontal half extents (x, y in its own frame; radius twice for round shapes), m."""
    i = s.row(name)
    return float(s.size[i, 0]), float(s.size[i, 1])


def floor(s: TabletopState, name: str) -> float:
    """Height of a container's inner floor above the table, m."""
    return float(s.pos[s.row(name), 2])


def grip_closed(s: TabletopState) -> float:
    """How far the last grip command closes the jaws: 0 open .. 1 closed."""
    return 1.0 - float(s.grip_cmd)


def height(s: TabletopState, name: str) -> float:
    """Height of an object's lowest point above the table (alias of `bottom`), m."""
    return bottom(s, name)


# ---- goals -----------------------------------------------------------------------------------------


def goal_holds(s: TabletopState, g: GoalPredicate) -> bool:
    """One goal conjunct. `in` and `on` also require the object to be released (it rests, not held)."""
    if g.name == "in":
        return inside(s, g.args[0], g.args[1]) and not grasped(s, g.args[0])
    if g.name == "on":
        return on(s, g.args[0], g.args[1]) and not grasped(s, g.args[0])
    if g.name == "at_region":
        return at_region(s, g.args[0], g.args[1])
    assert g.value is not None and g.tol is not None  # enforced by GoalPredicate
    return abs(drawer_fraction(s, g.args[0]) - g.value) <= g.tol


def goal_satisfied(s: TabletopState, spec: ScenarioSpec) -> bool:
    """Every conjunct of `spec.goal` holds in `s`: the task's success, a predicate over the state."""
    return all(goal_holds(s, g) for g in spec.goal)


def released(s: TabletopState, spec: ScenarioSpec) -> bool:
    """Neither finger touches an entity the goal names (the gripper has let go of what the task moves)."""
    left, right = s.finger_contacts
    return not any(a in left or a in right for g in spec.goal for a in g.args)


def goal_text(g: GoalPredicate) -> str:
    """A conjunct as text, e.g. "in(obj0, tray)" or "drawer_fraction(drawer0) = 0.8 +- 0.1"."""
    core = f"{g.name}({', '.join(g.args)})"
    return core if g.value is None else f"{core} = {g.value} +- {g.tol}"
