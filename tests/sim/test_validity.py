"""Validity checks: good scenes pass, each kind of bad scene gets its named reason."""

from __future__ import annotations

import json

import pytest

from coda.scene.spec import ContainerSpec, GoalPredicate, ObjectSpec
from coda.sim.tabletop.validity import check_validity


def test_valid_scenes_pass_with_the_expert(specs):
    for family, spec in specs.items():
        r = check_validity(spec)
        assert r.valid and r.reason is None, f"{family}: {r}"
        assert r.details["expert_steps"] > 0


def test_overlapping_objects_are_interpenetration(scenes):
    spec = scenes.pick_place()
    spec = spec.replace(objects=(spec.objects[0], spec.objects[1].model_copy(update={"pos": (0.06, -0.09)})))
    r = check_validity(spec, expert=False)
    assert (r.valid, r.reason) == (False, "interpenetration")
    assert set(r.details["pair"]) == {"obj0", "obj1"} and r.details["depth"] > 0.004


def test_overlapping_fixtures_are_interpenetration(scenes):
    spec = scenes.pick_place()
    second = ContainerSpec(name="bowl", kind="bowl", size=(0.06, 0.06, 0.02), color="white", pos=(0.15, 0.2))
    r = check_validity(spec.replace(containers=(*spec.containers, second)), expert=False)
    assert r.reason == "interpenetration" and set(r.details["pair"]) == {"tray", "bowl"}


def test_object_outside_the_workspace(scenes):
    with pytest.raises(ValueError, match="less than or equal to 0.3"):
        scenes.pick_place(pos=(0.36, 0.0))  # a centre off the table is refused by the scene itself
    spec = scenes.pick_place()
    off = spec.objects[0].model_copy(update={"pos": (0.36, 0.0)})  # model_copy skips validation: the check still holds
    r = check_validity(spec.model_copy(update={"objects": (off, *spec.objects[1:])}), expert=False)
    assert r.reason == "out_of_workspace" and r.details["entity"] == "obj0"


def test_push_start_out_of_reach_is_unreachable(scenes):
    spec = scenes.push()
    far = spec.objects[0].model_copy(update={"pos": (0.27, 0.0)})
    region = spec.regions[0].model_copy(update={"center": (0.1, 0.0)})  # pushing towards -x needs the jaws past x=0.3
    r = check_validity(spec.replace(objects=(far,), regions=(region,)), expert=False)
    assert r.reason == "unreachable" and "push start" in r.details["what"]
    assert json.loads(json.dumps(r.details))["pos"][0] > 0.3  # details are plain data, ready to record


def test_object_too_large_for_the_container_is_impossible(scenes):
    spec = scenes.pick_place()
    small = spec.containers[0].model_copy(update={"size": (0.015, 0.05, 0.02)})
    r = check_validity(spec.replace(containers=(small,)), expert=False)
    assert r.reason == "impossible_goal" and "does not fit" in r.details["why"]


def test_ungraspable_object_for_pick_place_is_impossible(scenes):
    r = check_validity(scenes.pick_place(size=(0.06, 0.06, 0.02)), expert=False)
    assert r.reason == "impossible_goal" and "wider than the jaws" in r.details["why"]


def test_goal_already_met(scenes):
    r = check_validity(scenes.pick_place(pos=(0.12, 0.14)), expert=False)  # starts inside the tray
    assert r.reason == "goal_already_satisfied"


def test_unstable_stack_is_unsettled(scenes):
    spec = scenes.stack()
    ball = ObjectSpec(name="ball", shape="sphere", size=(0.02, 0.02, 0.02), color="red", pos=(0.11, -0.07), on="obj1")
    top = ObjectSpec(name="top", shape="box", size=(0.02, 0.02, 0.02), color="blue", pos=(0.115, -0.07), on="ball")
    r = check_validity(spec.replace(objects=(*spec.objects, ball, top)), expert=False)
    assert r.reason == "unsettled"


def test_stacking_cycle_is_a_compile_error(scenes):
    spec = scenes.stack()
    a, b = spec.objects
    cyc = spec.replace(objects=(a.model_copy(update={"on": "obj1"}), b.model_copy(update={"on": "obj0"})))
    r = check_validity(cyc, expert=False)
    assert r.reason == "compile_error" and "cycle" in r.details["error"]


def test_expert_failure_is_reported(scenes):
    r = check_validity(scenes.drawer(), max_steps=5)
    assert (r.reason, r.details["steps"]) == ("expert_failed", 5)


def test_drawer_goal_out_of_range_is_impossible(scenes):
    spec = scenes.drawer()
    bad = spec.replace(goal=(GoalPredicate(name="drawer_fraction", args=("drawer0",), value=1.5, tol=0.1),))
    assert check_validity(bad, expert=False).reason == "impossible_goal"
