"""Scripted experts: every family on hand-built and random scenes, and recovery from perturbed starts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coda.scene.spec import FAMILIES
from coda.sim.tabletop import predicates as P
from coda.sim.tabletop.env import TabletopEnv
from coda.sim.tabletop.experts import ExpertError, expert_for, grasp_yaw, rollout_expert, wrap_half, wrap_quarter
from coda.sim.tabletop.reference import reference_scene


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv()
    yield e
    e.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_expert_solves_hand_built_scene(env, specs, family):
    ep = rollout_expert(env, specs[family])
    assert ep.success, f"{family}: expert failed after {ep.length} steps"
    assert P.goal_satisfied(ep.states[-1], specs[family])
    assert not P.goal_satisfied(ep.states[0], specs[family])
    assert ep.actions.shape == (ep.length, 5) and len(ep.states) == ep.length + 1


@pytest.mark.parametrize("family", FAMILIES)
def test_expert_solves_random_scenes(env, family):
    rng = np.random.default_rng(2024)
    for _ in range(3):
        spec = reference_scene(family, rng)
        ep = rollout_expert(env, spec, record=False)
        assert ep.success, f"{family} scene {spec.spec_id}: expert failed after {ep.length} steps"


def test_expert_chunks_executed_open_loop_also_succeed(env, specs):
    ep = rollout_expert(env, specs["pick_place"], replan_every=8)
    assert ep.success
    assert all(c.shape == (8, 5) and c.dtype == np.float32 for c in ep.chunks)


def test_recovers_when_the_object_starts_in_hand(specs):
    spec = specs["pick_place"]
    env = TabletopEnv(spec)
    env.reset()
    ex = expert_for(spec)
    while not P.lifted(env.state(), "obj0"):  # drive the expert until the cube is held in the air
        env.step(ex.act(env.state())[0])
        assert env.steps < 60
    snapshot = env.get_state()
    fresh = TabletopEnv()
    fresh.set_state(snapshot)
    assert expert_for(spec).phase(fresh.state()) in ("lift", "carry")
    fresh_expert = expert_for(spec)
    for _ in range(120):
        _, _, term, _, info = fresh.step(fresh_expert.act(fresh.state())[0])
        if term:
            break
    assert info["success"]
    env.close()
    fresh.close()


def test_recovers_when_the_object_is_dropped_mid_carry(specs):
    spec = specs["pick_place"]
    env = TabletopEnv(spec)
    env.reset()
    ex = expert_for(spec)
    while not P.lifted(env.state(), "obj0", h=0.05):
        env.step(ex.act(env.state())[0])
        assert env.steps < 60
    for _ in range(4):  # open the jaws where it is: the cube falls back to the table
        s = env.state()
        env.step(np.array([*s.gripper_pos, s.gripper_yaw, 1.0], dtype=np.float32))
    assert not P.grasped(env.state(), "obj0")
    info = {"success": False}
    for _ in range(150):
        _, _, term, _, info = env.step(ex.act(env.state())[0])
        if term:
            break
    assert info["success"]
    env.close()


def test_recovers_when_the_object_is_knocked_over(specs):
    spec = specs["stack"]
    env = TabletopEnv(spec)
    env.reset()
    d, idx = env.data, env.scene.index
    adr = idx.obj_qpos[0]
    d.qpos[adr:adr + 7] = [-0.05, 0.12, 0.02, math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 0.0]  # on its side
    snap = env.get_state()
    env.set_state(snap)
    assert abs(env.state().rot[0, 2, 2]) < 0.1  # its z axis now lies flat
    ex = expert_for(spec)
    info = {"success": False}
    for _ in range(150):
        _, _, term, _, info = env.step(ex.act(env.state())[0])
        if term:
            break
    assert info["success"]
    env.close()


@pytest.mark.parametrize("fraction, value", [(0.5, 1.0), (0.5, 0.0), (0.9, 0.3)])
def test_drawer_expert_from_half_open(scenes, fraction, value):
    env = TabletopEnv()
    ep = rollout_expert(env, scenes.drawer(fraction=fraction, value=value), record=False)
    assert ep.success
    env.close()


def test_grasp_yaw_is_a_consistent_function_of_pose(env, scenes):
    for yaw, want in ((0.3, 0.3), (0.3 + math.pi / 2, 0.3), (1.0, 1.0 - math.pi / 2), (-2.0, -2.0 + math.pi / 2)):
        env.reset_to(scenes.pick_place(yaw=yaw))
        assert grasp_yaw(env.state(), "obj0") == pytest.approx(want, abs=1e-3)
    env.reset_to(scenes.pick_place(shape="cylinder", yaw=1.2))
    assert grasp_yaw(env.state(), "obj0") == 0.0
    assert wrap_half(math.pi / 2 + 0.1) == pytest.approx(-math.pi / 2 + 0.1)
    assert wrap_quarter(math.pi / 4 + 0.1) == pytest.approx(-math.pi / 4 + 0.1)


def test_expert_rejects_goals_on_the_wrong_kinds(scenes):
    spec = scenes.pick_place()
    bad = spec.replace(goal=({"name": "in", "args": ["obj0", "obj1"]},))
    with pytest.raises(ExpertError, match="needs entities of kinds"):
        expert_for(bad)


def test_push_expert_leaves_the_object_well_inside_the_region(env):
    """A push demo must not end with the object just over the region's edge: a policy copying it stops there,
    and a few millimetres short is a failure."""
    from coda.scene.splits import make_split
    from coda.sim.tabletop.experts import PUSH_DEPTH

    for spec in make_split("push", "position", 4, seed=7):
        ep = rollout_expert(env, spec)
        assert ep.success, f"{spec.spec_id}: expert failed after {ep.length} steps"
        s = ep.states[-1]
        obj, region = spec.goal[0].args
        i, j = s.row(obj, "object"), s.row(region, "region")
        depth = np.abs(s.pos[i, :2] - s.pos[j, :2]) / s.size[j, :2]
        assert depth.max() <= PUSH_DEPTH + 0.2, (spec.spec_id, depth)  # the edge is 1.0
