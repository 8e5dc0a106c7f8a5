"""The staged potential Φ(s) = (k + p) / K on hand-built simulator states, with the simulator's predicates."""

from __future__ import annotations

import numpy as np
import pytest

from coda.scene import geometry as G
from coda.scene.spec import GoalPredicate, ScenarioSpec
from coda.shaping.program import ProgramError, Stage, StageProgram
from coda.shaping.text2potential import StagedPotential, canonical_plan, compile_plan, spearman_with_time
from coda.sim.tabletop.predicates import goal_satisfied

FLOOR = G.CONTAINER_FLOOR


def pick_place_states(spec, state_of):
    """A pick-and-place of obj0 (2 cm half cube at (0.05, 0.10)) into container0 (bowl at (0, -0.15))."""
    o = (0.05, 0.10)
    b = (0.0, -0.15)
    seq = [state_of(spec)]
    seq.append(state_of(spec, gripper=(*o, 0.15)))
    seq.append(state_of(spec, gripper=(*o, 0.06)))
    seq.append(state_of(spec, gripper=(*o, 0.02)))
    seq.append(state_of(spec, gripper=(*o, 0.02), grip=0.3))
    seq.append(state_of(spec, gripper=(*o, 0.02), grip=0.0, held="obj0"))
    for z in (0.04, 0.08, 0.14):  # lift: centre height; bottom = z - 0.02
        seq.append(state_of(spec, gripper=(*o, z), grip=0.0, held="obj0", pos={"obj0": (*o, z)}))
    for t in (0.25, 0.5, 0.75, 1.0):  # carry at height
        xy = (o[0] + t * (b[0] - o[0]), o[1] + t * (b[1] - o[1]))
        seq.append(state_of(spec, gripper=(*xy, 0.14), grip=0.0, held="obj0", pos={"obj0": (*xy, 0.14)}))
    for z in (0.10, 0.06, FLOOR + 0.025):  # lower into the bowl
        seq.append(state_of(spec, gripper=(*b, z), grip=0.0, held="obj0", pos={"obj0": (*b, z)}))
    seq.append(state_of(spec, gripper=(*b, FLOOR + 0.02), grip=1.0, pos={"obj0": (*b, FLOOR + 0.02)}))
    seq.append(state_of(spec, gripper=(*b, 0.2), grip=1.0, pos={"obj0": (*b, FLOOR + 0.02)}))
    return seq


def test_phi_rises_along_a_pick_and_place_and_peaks_at_success(kitchen, state_of) -> None:
    pot = compile_plan(canonical_plan(kitchen), kitchen)
    assert pot.K == 5
    states = pick_place_states(kitchen, state_of)
    phis = pot.phis(states)
    assert np.all(np.diff(phis) >= -1e-12), phis
    assert np.sum(np.diff(phis) > 1e-6) >= len(states) - 3  # it actually moves nearly every step
    assert phis[0] < 0.1 and phis[-1] == 1.0 and phis[-2] == 1.0
    assert [goal_satisfied(s, kitchen) for s in states] == [False] * (len(states) - 2) + [True, True]
    assert spearman_with_time(phis) > 0.98
    assert [pot.stages_done(s) for s in states][:7] == [0, 0, 1, 1, 1, 2, 2]
    assert "5/5 done (place(obj0, container0))" == pot.explain(states[-1])


def test_dropping_or_grasping_the_wrong_object_lowers_phi(kitchen, state_of) -> None:
    pot = compile_plan(canonical_plan(kitchen), kitchen)
    carrying = state_of(kitchen, gripper=(0.02, -0.05, 0.14), grip=0.0, held="obj0", pos={"obj0": (0.02, -0.05, 0.14)})
    dropped = state_of(kitchen, gripper=(0.02, -0.05, 0.14), grip=1.0, pos={"obj0": (0.02, -0.05, 0.02)})
    assert pot.phi(dropped) < pot.phi(carrying) - 0.3
    wrong = state_of(kitchen, gripper=(-0.05, 0.2, 0.1), grip=0.0, held="obj3", pos={"obj3": (-0.05, 0.2, 0.1)})
    at_target = state_of(kitchen, gripper=(0.05, 0.10, 0.02))
    assert pot.phi(wrong) < pot.phi(at_target) and pot.stages_done(wrong) == 0


def test_push_and_drawer_sequences(kitchen, state_of, regoal) -> None:
    push = regoal(kitchen, "push", GoalPredicate(name="at_region", args=("obj2", "region0")))
    pot = compile_plan(canonical_plan(push), push)
    start, goal = np.array([0.10, -0.05]), np.array([0.2, 0.0])
    states = [state_of(push), state_of(push, gripper=(0.0, -0.1, 0.03))]
    for t in np.linspace(0, 1, 6):
        xy = start + t * (goal - start)
        states.append(state_of(push, gripper=(*(xy - [0.04, 0.02]), 0.03), pos={"obj2": (*xy, 0.03)}))
    phis = pot.phis(states)
    assert np.all(np.diff(phis) >= 0) and phis[-1] == 1.0 and phis[2] < 1.0
    assert [goal_satisfied(s, push) for s in states] == [p == 1.0 for p in phis]

    half = regoal(kitchen, "drawer", GoalPredicate(name="drawer_fraction", args=("drawer0",), value=0.5, tol=0.1))
    pot = compile_plan(canonical_plan(half), half)
    assert pot.program.describe() == "reach(drawer0) → open(drawer0, 0.5)"
    d = half.drawers[0]
    handle = lambda f: G.handle_position(d, f)  # noqa: E731
    states = [state_of(half)] + [state_of(half, gripper=handle(f), fraction={"drawer0": f}) for f in (0.0, 0.1, 0.3, 0.45)]
    phis = pot.phis(states)
    assert np.all(np.diff(phis) > 0) and phis[-1] == 1.0
    over = state_of(half, gripper=handle(0.8), fraction={"drawer0": 0.8})
    assert pot.phi(over) < 1.0 and not goal_satisfied(over, half)

    shut = regoal(kitchen, "drawer", GoalPredicate(name="drawer_fraction", args=("drawer0",), value=0.0, tol=0.1),
                  drawers=(d.model_copy(update={"fraction": 0.9}),))
    pot = compile_plan(canonical_plan(shut), shut)
    phis = pot.phis([state_of(shut, gripper=handle(f), fraction={"drawer0": f}) for f in (0.9, 0.6, 0.3, 0.05)])
    assert np.all(np.diff(phis) > 0) and phis[-1] == 1.0


def _random_state(spec: ScenarioSpec, state_of, rng: np.random.Generator):
    g = spec.goal[0]
    pos, held, fraction = {}, None, {}
    if g.name in ("in", "on", "at_region"):
        o = g.args[0]
        tgt = spec.entity(g.args[1])
        center = np.array(getattr(tgt, "pos", None) or tgt.center)
        near = rng.random() < 0.6
        xy = center + rng.normal(scale=0.03 if near else 0.15, size=2)
        base = {"in": FLOOR, "at_region": 0.0}.get(g.name) if g.name != "on" else 2 * spec.object(g.args[1]).size[2]
        z = base + spec.object(o).size[2] + (0.0 if rng.random() < 0.6 else rng.uniform(0.0, 0.1))
        pos[o] = (*xy, z)
        held = o if rng.random() < 0.3 else None
    else:
        fraction[g.args[0]] = float(rng.uniform(0, 1))
    grip = (*rng.uniform(-0.3, 0.3, size=2), rng.uniform(0.0, 0.3))
    return state_of(spec, gripper=grip, grip=float(rng.uniform()), held=held, pos=pos, fraction=fraction)


@pytest.mark.parametrize(
    "goal",
    [
        GoalPredicate(name="in", args=("obj0", "container0")),
        GoalPredicate(name="in", args=("obj2", "container1")),
        GoalPredicate(name="on", args=("obj0", "obj1")),
        GoalPredicate(name="at_region", args=("obj2", "region0")),
        GoalPredicate(name="drawer_fraction", args=("drawer0",), value=0.5, tol=0.1),
        GoalPredicate(name="drawer_fraction", args=("drawer0",), value=1.0, tol=0.1),
        GoalPredicate(name="drawer_fraction", args=("drawer0",), value=0.0, tol=0.1),
    ],
)
def test_phi_is_one_exactly_when_the_goal_holds(kitchen, state_of, regoal, goal) -> None:
    family = {"in": "pick_place", "on": "stack", "at_region": "push", "drawer_fraction": "drawer"}[goal.name]
    spec = regoal(kitchen, family, goal)
    pot = compile_plan(canonical_plan(spec), spec)
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for _ in range(300):
        s = _random_state(spec, state_of, rng)
        phi, ok = pot.phi(s), goal_satisfied(s, spec)
        assert 0.0 <= phi <= 1.0
        assert (phi == 1.0) == ok, (phi, ok, pot.explain(s))
        seen[ok] += 1
    assert seen[True] >= 20 and seen[False] >= 20


def test_potential_checks_the_program_against_the_scene(kitchen) -> None:
    bad = StageProgram(stages=(Stage(kind="grasp", args=("container0",)),))
    with pytest.raises(ProgramError, match="'container0' is a container, expected object"):
        StagedPotential(bad, kitchen)
