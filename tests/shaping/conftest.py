"""Hand-built tabletop states (the simulator's own TabletopState) and a scene with one of everything."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from coda.scene import geometry as G
from coda.scene.spec import ContainerSpec, DrawerSpec, GoalPredicate, ObjectSpec, RegionSpec, ScenarioSpec
from coda.sim.tabletop.predicates import TabletopState


def make_state(
    spec: ScenarioSpec,
    gripper: tuple[float, float, float] = (-0.25, 0.0, 0.25),
    grip: float = 1.0,
    held: str | None = None,
    pos: Mapping[str, tuple[float, float, float]] | None = None,
    fraction: Mapping[str, float] | None = None,
) -> TabletopState:
    """A state of `spec` as the simulator would report it: entities at their spec poses unless moved.

    `held` puts both fingers in contact with that entity; `pos` moves entities; `fraction` opens drawers.
    """
    pos, fraction = dict(pos or {}), dict(fraction or {})
    names, kinds, types, P, S, F, T, A = [], [], [], [], [], [], [], []
    for o in spec.objects:
        names.append(o.name), kinds.append("object"), types.append(o.shape)
        P.append(pos.get(o.name, (*o.pos, G.object_half_height(o)))), S.append(o.size), F.append(0.0), T.append(0.0)
        A.append((0.0, 0.0, 0.0))
    for c in spec.containers:
        names.append(c.name), kinds.append("container"), types.append(c.kind)
        P.append((*c.pos, G.CONTAINER_FLOOR)), S.append(c.size), F.append(0.0), T.append(0.0), A.append((0.0, 0.0, 0.0))
    for d in spec.drawers:
        f = fraction.get(d.name, d.fraction)
        names.append(d.name), kinds.append("drawer"), types.append("drawer")
        P.append(G.handle_position(d, f)), S.append((0.1, G.CABINET_HALF_Y, G.CABINET_HALF_Z)), F.append(f)
        T.append(d.travel), A.append((*G.drawer_axis(d), 0.0))
    for r in spec.regions:
        names.append(r.name), kinds.append("region"), types.append("region")
        P.append((*r.center, 0.0)), S.append((*r.half, 0.0)), F.append(0.0), T.append(0.0), A.append((0.0, 0.0, 0.0))
    n = len(names)
    contact = frozenset({held}) if held else frozenset()
    return TabletopState(
        time=0.0,
        gripper_pos=np.asarray(gripper, dtype=float),
        gripper_yaw=0.0,
        gripper_width=0.02 if held else 0.08,
        grip_cmd=grip,
        gripper_vel=np.zeros(3),
        finger_contacts=(contact, contact),
        names=tuple(names),
        kinds=tuple(kinds),
        types=tuple(types),
        pos=np.asarray(P, dtype=float),
        rot=np.repeat(np.eye(3)[None], n, axis=0),
        size=np.asarray(S, dtype=float),
        lin_vel=np.zeros((n, 3)),
        fraction=np.asarray(F, dtype=float),
        travel=np.asarray(T, dtype=float),
        axis=np.asarray(A, dtype=float),
    )


@pytest.fixture
def state_of() -> Callable[..., TabletopState]:
    return make_state


@pytest.fixture
def kitchen() -> ScenarioSpec:
    """One of everything: two cubes, a block, a cylinder, a bowl, a tray, two regions and a drawer."""
    return ScenarioSpec(
        family="pick_place",
        objects=(
            ObjectSpec(name="obj0", shape="box", size=(0.02, 0.02, 0.02), color="red", pos=(0.05, 0.10)),
            ObjectSpec(name="obj1", shape="box", size=(0.04, 0.04, 0.02), color="blue", pos=(0.15, 0.15)),
            ObjectSpec(name="obj2", shape="cylinder", size=(0.02, 0.02, 0.03), color="green", pos=(0.10, -0.05)),
            ObjectSpec(name="obj3", shape="box", size=(0.02, 0.02, 0.02), color="blue", pos=(-0.05, 0.2)),
        ),
        containers=(
            ContainerSpec(name="container0", kind="bowl", size=(0.055, 0.055, 0.02), color="gray", pos=(0.0, -0.15)),
            ContainerSpec(name="container1", kind="tray", size=(0.075, 0.06, 0.012), color="white", pos=(-0.15, -0.15)),
        ),
        drawers=(DrawerSpec(name="drawer0", color="brown", pos=(0.2, -0.18), yaw=0.0),),
        regions=(
            RegionSpec(name="region0", center=(0.2, 0.0), half=(0.07, 0.07), color="green"),
            RegionSpec(name="region1", center=(-0.2, 0.2), half=(0.07, 0.07), color="yellow"),
        ),
        instruction="put the small red cube in the gray bowl",
        goal=(GoalPredicate(name="in", args=("obj0", "container0")),),
    )


def with_goal(spec: ScenarioSpec, family: str, goal: GoalPredicate, **kw: Any) -> ScenarioSpec:
    return spec.replace(family=family, goal=(goal,), **kw)


@pytest.fixture
def regoal() -> Callable[..., ScenarioSpec]:
    return with_goal
