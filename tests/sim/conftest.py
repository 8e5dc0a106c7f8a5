"""Hand-built tabletop scenes shared by the simulator tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coda.scene.spec import ContainerSpec, DrawerSpec, GoalPredicate, ObjectSpec, RegionSpec, ScenarioSpec


def pick_place_spec(**obj: object) -> ScenarioSpec:
    """A red cube and a distractor; goal: the cube in a gray tray."""
    cube = dict(name="obj0", shape="box", size=(0.02, 0.02, 0.02), color="red", pos=(0.05, -0.1), yaw=0.3)
    cube.update(obj)
    return ScenarioSpec(
        family="pick_place",
        objects=(ObjectSpec(**cube), ObjectSpec(name="obj1", shape="cylinder", size=(0.02, 0.02, 0.03), color="blue", pos=(-0.1, 0.0))),
        containers=(ContainerSpec(name="tray", kind="tray", size=(0.07, 0.07, 0.02), color="gray", pos=(0.12, 0.14)),),
        instruction="put the small red cube in the gray tray",
        goal=(GoalPredicate(name="in", args=("obj0", "tray")),),
    )


def stack_spec() -> ScenarioSpec:
    return ScenarioSpec(
        family="stack",
        objects=(
            ObjectSpec(name="obj0", shape="box", size=(0.02, 0.02, 0.02), color="green", pos=(-0.05, 0.12)),
            ObjectSpec(name="obj1", shape="box", size=(0.035, 0.035, 0.02), color="yellow", pos=(0.1, -0.08), yaw=-0.4, mass=0.3),
        ),
        instruction="stack the small green cube on the large yellow cube",
        goal=(GoalPredicate(name="on", args=("obj0", "obj1")),),
    )


def push_spec() -> ScenarioSpec:
    return ScenarioSpec(
        family="push",
        objects=(ObjectSpec(name="obj0", shape="box", size=(0.055, 0.055, 0.03), color="orange", pos=(0.0, -0.1), mass=0.3),),
        regions=(RegionSpec(name="goal", center=(0.05, 0.08), half=(0.06, 0.06), color="green"),),
        instruction="push the large orange cube into the green region",
        goal=(GoalPredicate(name="at_region", args=("obj0", "goal")),),
    )


def drawer_spec(fraction: float = 0.0, value: float = 0.9) -> ScenarioSpec:
    return ScenarioSpec(
        family="drawer",
        objects=(ObjectSpec(name="obj0", shape="sphere", size=(0.02, 0.02, 0.02), color="purple", pos=(-0.15, 0.2)),),
        drawers=(DrawerSpec(name="drawer0", color="white", pos=(0.17, 0.0), yaw=0.2, fraction=fraction),),
        instruction="open the white drawer" if value > fraction else "close the white drawer",
        goal=(GoalPredicate(name="drawer_fraction", args=("drawer0",), value=value, tol=0.1),),
    )


@pytest.fixture
def specs() -> dict[str, ScenarioSpec]:
    """One hand-built scene per family."""
    return {"pick_place": pick_place_spec(), "stack": stack_spec(), "push": push_spec(), "drawer": drawer_spec()}


@pytest.fixture
def scenes() -> SimpleNamespace:
    """The scene factories, for tests that vary a hand-built scene."""
    return SimpleNamespace(pick_place=pick_place_spec, stack=stack_spec, push=push_spec, drawer=drawer_spec)
