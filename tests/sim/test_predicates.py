"""Predicates on hand-constructed states (no simulation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coda.scene.spec import GoalPredicate
from coda.sim.tabletop import predicates as P
from coda.sim.tabletop.builder import yaw_mat
from coda.sim.tabletop.predicates import PredicateError, TabletopState


def make_state(entities, gripper=(0.0, 0.0, 0.2), contacts=(frozenset(), frozenset()), width=0.08):
    """entities: (name, kind, type, pos, size, yaw, fraction) tuples."""
    n = len(entities)
    travel = np.array([0.15 if e[1] == "drawer" else 0.0 for e in entities])
    axis = np.array([[-1.0, 0.0, 0.0] if e[1] == "drawer" else [0.0, 0.0, 0.0] for e in entities]).reshape(n, 3)
    return TabletopState(
        time=0.0, gripper_pos=np.array(gripper, float), gripper_yaw=0.0, gripper_width=width, grip_cmd=1.0,
        gripper_vel=np.zeros(3), finger_contacts=contacts,
        names=tuple(e[0] for e in entities), kinds=tuple(e[1] for e in entities), types=tuple(e[2] for e in entities),
        pos=np.array([e[3] for e in entities], float), rot=np.stack([yaw_mat(e[5]) for e in entities]),
        size=np.array([e[4] for e in entities], float), lin_vel=np.zeros((n, 3)),
        fraction=np.array([e[6] for e in entities], float), travel=travel, axis=axis,
    )


CUBE = ("cube", "object", "box", (0.1, 0.0, 0.02), (0.02, 0.02, 0.02), 0.0, 0.0)
TRAY = ("tray", "container", "tray", (0.1, 0.0, 0.008), (0.07, 0.05, 0.02), 0.0, 0.0)
BASE = ("base", "object", "box", (-0.1, 0.1, 0.02), (0.04, 0.03, 0.02), math.pi / 2, 0.0)
REGION = ("goal", "region", "region", (0.0, -0.2, 0.0), (0.05, 0.05, 0.0), 0.0, 0.0)
DRAWER = ("drw", "drawer", "drawer", (0.0, 0.2, 0.08), (0.1, 0.12, 0.06), 0.0, 0.4)


def with_pos(entity, pos, yaw=None):
    return (*entity[:3], pos, entity[4], entity[5] if yaw is None else yaw, entity[6])


def test_inside_needs_centre_over_the_floor_and_bottom_below_rim():
    inside = make_state([with_pos(CUBE, (0.15, 0.03, 0.028)), TRAY])
    assert P.inside(inside, "cube", "tray")
    assert not P.inside(make_state([with_pos(CUBE, (0.18, 0.0, 0.028)), TRAY]), "cube", "tray")  # past the x wall
    assert not P.inside(make_state([with_pos(CUBE, (0.15, 0.06, 0.028)), TRAY]), "cube", "tray")  # past the y wall
    assert not P.inside(make_state([with_pos(CUBE, (0.1, 0.0, 0.1)), TRAY]), "cube", "tray")  # above the rim
    rotated = (*TRAY[:5], math.pi / 2, 0.0)  # the long side now runs along y
    assert P.inside(make_state([with_pos(CUBE, (0.1, 0.06, 0.028)), rotated]), "cube", "tray")


def test_on_uses_the_base_footprint_in_its_own_frame_and_contact_height():
    top = with_pos(CUBE, (-0.1, 0.135, 0.06))  # base yawed 90 deg: its 0.04 half extent runs along y
    assert P.on(make_state([top, BASE]), "cube", "base")
    assert not P.on(make_state([with_pos(CUBE, (-0.135, 0.1, 0.06)), BASE]), "cube", "base")
    assert not P.on(make_state([with_pos(CUBE, (-0.1, 0.1, 0.09)), BASE]), "cube", "base")  # hovering
    assert not P.on(make_state([with_pos(CUBE, (-0.1, 0.1, 0.06)), BASE]), "cube", "cube")


def test_grasped_and_lifted_follow_finger_contacts_and_height():
    both = (frozenset({"cube"}), frozenset({"cube", "table"}))
    high = make_state([with_pos(CUBE, (0.1, 0.0, 0.07))], contacts=both)
    assert P.grasped(high, "cube") and P.lifted(high, "cube") and P.lifted(high, "cube", h=0.05)
    assert not P.lifted(high, "cube", h=0.06)
    one = make_state([with_pos(CUBE, (0.1, 0.0, 0.07))], contacts=(frozenset({"cube"}), frozenset({"table"})))
    assert not P.grasped(one, "cube") and not P.lifted(one, "cube")
    low = make_state([CUBE], contacts=both)
    assert P.grasped(low, "cube") and not P.lifted(low, "cube")
    closed_on_top = make_state([CUBE], contacts=both, width=0.0)  # jaws shut, pressing down on it
    assert not P.grasped(closed_on_top, "cube")


def test_at_region_drawer_fraction_distances_and_heights():
    s = make_state([with_pos(CUBE, (0.04, -0.16, 0.02)), REGION, DRAWER], gripper=(0.04, -0.16, 0.12))
    assert P.at_region(s, "cube", "goal")
    assert not P.at_region(make_state([with_pos(CUBE, (0.06, -0.2, 0.02)), REGION]), "cube", "goal")
    assert P.drawer_fraction(s, "drw") == pytest.approx(0.4)
    assert P.xy_distance(s, "cube", "goal") == pytest.approx(math.hypot(0.04, 0.04))
    assert P.gripper_distance(s, "cube") == pytest.approx(0.1)
    assert P.bottom(s, "cube") == pytest.approx(0.0) and P.top(s, "cube") == pytest.approx(0.04)
    assert P.top(s, "drw") == pytest.approx(0.12)


def test_half_height_of_a_lying_cylinder():
    lying = ("can", "object", "cylinder", (0.0, 0.0, 0.02), (0.02, 0.02, 0.05), 0.0, 0.0)
    s = make_state([lying])
    rot = s.rot.copy()
    rot[0] = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])  # axis along world y
    s2 = TabletopState(**{**s.__dict__, "rot": rot, "index": {}})
    assert P.half_height(s, "can") == pytest.approx(0.05)
    assert P.half_height(s2, "can") == pytest.approx(0.02)


def test_goal_satisfied_requires_release_for_in_and_on():
    spec_goal = GoalPredicate(name="in", args=("cube", "tray"))
    free = make_state([with_pos(CUBE, (0.12, 0.0, 0.028)), TRAY])
    held = make_state([with_pos(CUBE, (0.12, 0.0, 0.028)), TRAY], contacts=(frozenset({"cube"}), frozenset({"cube"})))
    assert P.goal_holds(free, spec_goal) and not P.goal_holds(held, spec_goal)
    drawer_goal = GoalPredicate(name="drawer_fraction", args=("drw",), value=0.5, tol=0.1)
    assert P.goal_holds(make_state([DRAWER]), drawer_goal)
    assert not P.goal_holds(make_state([DRAWER]), GoalPredicate(name="drawer_fraction", args=("drw",), value=0.8, tol=0.1))


def test_unknown_or_wrong_kind_entities_raise_named_errors():
    s = make_state([CUBE, TRAY])
    with pytest.raises(PredicateError, match="no entity named 'mug'"):
        P.grasped(s, "mug")
    with pytest.raises(PredicateError, match="'tray' is of kind 'container', expected kind 'object'"):
        P.inside(s, "tray", "tray")
