"""Predicates over a `LiberoState` for staged potentials (Text2potential) and the critic.

`LiberoPredicates` has the functions `coda.shaping.stages` reads from a backend (the same names and
meanings as `coda.sim.tabletop.predicates`), computed from the collision bounding boxes, finger contacts
and grip site of the state. Heights (`bottom`, `top`, `floor`) are measured from the table top, which is
the lowest bottom of the scene's movable entities at the start (`LiberoPredicates.for_state`): LIBERO
places everything on the table, on a fixture or on another object.

`goal_pair` is the (object, target) of a one-predicate `in` / `on` BDDL goal and `libero_kinds` the entity
kinds a stage program over it is checked against (the canonical program is `coda.critic.libero.libero_stage_program`).
With the goal pair given to `LiberoPredicates`, the last stage of that program holds exactly when the object is
released and LIBERO's `check_success()` holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from coda.sim.libero.errors import LiberoError
from coda.sim.libero.experts import pick_place_task
from coda.sim.libero.state import LiberoState
from coda.sim.libero.suites import bddl_goal, bddl_regions

if TYPE_CHECKING:
    from coda.sim.libero.scenario import LiberoScenario

ON_TOL = 0.02  # an object's bottom within this of a surface rests on it, m
MIN_HOLD_GAP = 0.002  # closed jaws this far apart or less hold nothing (a bowl wall leaves 3.5 mm), m


class LiberoPredicates:
    """Predicates of one LIBERO episode (see the module docstring).

    Args:
        table_z: world height of the table top, m.
        goal: the (object, target) pair of the episode's BDDL goal: `in` / `on` between them is LIBERO's own
            `check_success()` (`LiberoState.success`) rather than the box geometry, which is looser.
    """

    def __init__(self, table_z: float, goal: tuple[str, str] | None = None) -> None:
        self.table_z = float(table_z)
        self.goal = goal

    @classmethod
    def for_state(cls, s: LiberoState, goal: tuple[str, str] | None = None) -> "LiberoPredicates":
        """Predicates whose table top is the lowest bottom of the movable entities in `s`."""
        movable = ~np.asarray(s.fixture, dtype=bool)
        if not movable.any():
            raise LiberoError("the scene has no movable entity to find the table top from")
        return cls(float(np.min(s.center[movable, 2] - s.half[movable, 2])), goal)

    # -- geometry -----------------------------------------------------------------------------------

    @staticmethod
    def _i(s: LiberoState, name: str) -> int:
        try:
            return s.index[name]
        except KeyError:
            raise LiberoError(f"no entity '{name}' in the scene; entities: {list(s.names)}") from None

    def half_width(self, s: LiberoState, name: str) -> tuple[float, float]:
        """Horizontal half extents of the entity's bounding box, m."""
        i = self._i(s, name)
        return float(s.half[i, 0]), float(s.half[i, 1])

    def bottom(self, s: LiberoState, name: str) -> float:
        """Height of the entity's lowest point above the table top, m."""
        i = self._i(s, name)
        return float(s.center[i, 2] - s.half[i, 2]) - self.table_z

    def top(self, s: LiberoState, name: str) -> float:
        """Height of the entity's highest point above the table top, m."""
        i = self._i(s, name)
        return float(s.center[i, 2] + s.half[i, 2]) - self.table_z

    def floor(self, s: LiberoState, name: str) -> float:
        """Height of a container's inner floor above the table top (its box's bottom), m."""
        return self.bottom(s, name)

    def xy_distance(self, s: LiberoState, a: str, b: str) -> float:
        """Horizontal distance between the two entities' box centres, m."""
        return float(np.linalg.norm(s.center[self._i(s, a), :2] - s.center[self._i(s, b), :2]))

    def gripper_distance(self, s: LiberoState, name: str) -> float:
        """Distance from the grip site to the entity's box centre, m."""
        return float(np.linalg.norm(s.eef_pos - s.center[self._i(s, name)]))

    def _over(self, s: LiberoState, a: str, b: str) -> bool:
        i, j = self._i(s, a), self._i(s, b)
        return bool(np.all(np.abs(s.center[i, :2] - s.center[j, :2]) <= s.half[j, :2]))

    # -- contact and goals --------------------------------------------------------------------------

    def grasped(self, s: LiberoState, name: str) -> bool:
        """Both fingers touch the entity with the jaws not shut on nothing."""
        self._i(s, name)
        return name in s.grasped and s.gripper_width > MIN_HOLD_GAP

    def lifted(self, s: LiberoState, name: str, h: float = 0.03) -> bool:
        """Held with its lowest point at least `h` above the table top."""
        return self.grasped(s, name) and self.bottom(s, name) >= h

    def on(self, s: LiberoState, a: str, b: str) -> bool:
        """`a`'s centre is over `b`'s box and `a`'s bottom rests on `b`'s top (within ON_TOL); for the goal
        pair, the BDDL goal holds."""
        if (a, b) == self.goal:
            return bool(s.success)
        return a != b and self._over(s, a, b) and abs(self.bottom(s, a) - self.top(s, b)) <= ON_TOL

    def inside(self, s: LiberoState, obj: str, container: str) -> bool:
        """`obj`'s centre is within `container`'s box (horizontally and in height); for the goal pair, the
        BDDL goal holds."""
        if (obj, container) == self.goal:
            return bool(s.success)
        i, j = self._i(s, obj), self._i(s, container)
        return obj != container and bool(np.all(np.abs(s.center[i] - s.center[j]) <= s.half[j]))

    def at_region(self, s: LiberoState, obj: str, region: str) -> bool:
        raise LiberoError("LIBERO goal regions are not entities of the state; use inside / on")

    def drawer_fraction(self, s: LiberoState, drawer: str) -> float:
        raise LiberoError("LIBERO drawers are not modelled by these predicates yet")

    @staticmethod
    def grip_closed(s: LiberoState) -> float:
        """How far the last grip command closes the jaws: 0 open .. 1 closed."""
        return (float(s.grip_cmd) + 1.0) / 2.0


def libero_kinds(goal: Sequence[Sequence[str]], regions: dict[str, dict], names: Sequence[str]) -> dict[str, str]:
    """Entity kinds for stage programs: the target of an `in` goal is a container, every other entity an
    object (a plate or a bowl something is put on has a top surface, like a tabletop object)."""
    task = pick_place_task([list(g) for g in goal], regions, tuple(names))
    return {n: ("container" if (task.relation == "in" and n == task.target) else "object") for n in names}


def goal_pair(goal: Sequence[Sequence[str]], regions: dict[str, dict], names: Sequence[str]) -> tuple[str, str]:
    """(object, target) of a one-predicate `in` / `on` goal (the target of a region is its entity)."""
    task = pick_place_task([list(g) for g in goal], regions, tuple(names))
    return task.obj, task.target


def libero_predicates(first: LiberoState, scenario: "LiberoScenario") -> LiberoPredicates:
    """LIBERO's stage predicates for episodes of `scenario`: the table top read from `first` (an episode's
    initial state), `in` / `on` of the BDDL goal pair its own `check_success()`. Raises LiberoError for a goal
    that is not one `in` / `on`."""
    text = scenario.bddl_text()
    return LiberoPredicates.for_state(first, goal_pair(bddl_goal(text), bddl_regions(text), first.names))


__all__ = ["LiberoPredicates", "goal_pair", "libero_kinds", "libero_predicates"]
