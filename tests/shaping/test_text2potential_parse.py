"""Parsing stage plans in words (canonical and paraphrased) into stage programs over a scene."""

from __future__ import annotations

import numpy as np
import pytest

from coda.scene.generators import sample_base
from coda.scene.language import object_phrase
from coda.scene.spec import FAMILIES, GoalPredicate
from coda.shaping.program import ProgramError, StageProgram
from coda.shaping.text2potential import (
    PlanParseError,
    PlanRejected,
    canonical_plan,
    parse_plan,
    split_steps,
    try_parse_plan,
)


def test_split_steps_formats() -> None:
    want = ["reach the red cube", "grasp it", "lift it"]
    assert split_steps("1. reach the red cube 2. grasp it 3. lift it") == want
    assert split_steps("1) Reach the red cube.\n2) Grasp it.\n3) Lift it.") == want
    assert split_steps("Step 1: reach the red cube; Step 2: grasp it; Step 3: lift it") == want
    assert split_steps("reach the red cube\ngrasp it\nlift it") == want
    assert split_steps("Reach the red cube, then grasp it and lift it.") == want
    assert split_steps("Plan: reach the red cube. Grasp it. Lift it.") == want
    assert split_steps("first, reach the red cube; next grasp it; finally lift it") == want


@pytest.mark.parametrize(
    ("plan", "want"),
    [
        ("1. reach the red cube 2. grasp it 3. lift it 4. move above the gray bowl 5. release it inside the bowl",
         "reach(obj0) → grasp(obj0) → lift(obj0) → carry(obj0, container0) → place(obj0, container0)"),
        ("approach the scarlet cube, grab it, raise it, carry it over the basin, then drop it in the basin",
         "reach(obj0) → grasp(obj0) → lift(obj0) → carry(obj0, container0) → place(obj0, container0)"),
        ("go to the crimson cuboid; pick up the small red box; lift it 10 cm; bring it over the white tray; "
         "lower it onto the tray", "reach(obj0) → grasp(obj0) → lift(obj0, 0.1) → carry(obj0, container1) → "
         "place(obj0, container1)"),
        ("move to the tiny ruby cube\nclose the gripper on it\nraise it up\nmove it above the large azure block\n"
         "put it down on top of the big blue block", "reach(obj0) → grasp(obj0) → lift(obj0) → carry(obj0, obj1) → "
         "place(obj0, obj1)"),
        ("reach the red cube, grasp it, lift it, move above the gray bowl, open the gripper",
         "reach(obj0) → grasp(obj0) → lift(obj0) → carry(obj0, container0) → place(obj0, container0)"),
        ("stack the small blue cube on the large blue block", "place(obj3, obj1)"),
        ("move the green cylinder into the tray", "place(obj2, container1)"),
        ("1. reach the green cylinder 2. push it into the green region",
         "reach(obj2) → push(obj2, region0)"),
        ("approach the emerald canister from behind, then slide it to the yellow zone",
         "reach(obj2) → push(obj2, region1)"),
        ("nudge the lime tube until it sits within the jade patch", "push(obj2, region0)"),
        ("1. reach the drawer handle 2. open the drawer halfway", "reach(drawer0) → open(drawer0, 0.5)"),
        ("go to the brown drawer's handle, then pull it open fully", "reach(drawer0) → open(drawer0, 1)"),
        ("pull the drawer out to 40%", "open(drawer0, 0.4)"),
        ("draw the chestnut drawer out partway", "open(drawer0, 0.5)"),
        ("open the drawer", "open(drawer0, 1)"),
        ("close the drawer", "close(drawer0)"),
        ("reach the handle and shut it", "reach(drawer0) → close(drawer0)"),
        ("push the drawer closed", "close(drawer0)"),
        ("grasp obj0 then place it in container1", "grasp(obj0) → place(obj0, container1)"),
    ],
)
def test_paraphrased_plans(kitchen, plan: str, want: str) -> None:
    assert parse_plan(plan, kitchen).describe() == want


def test_open_without_an_amount_uses_the_goal(kitchen, regoal) -> None:
    spec = regoal(kitchen, "drawer", GoalPredicate(name="drawer_fraction", args=("drawer0",), value=0.5, tol=0.1))
    assert parse_plan("open the drawer", spec).stages[0].value == 0.5


@pytest.mark.parametrize(
    ("plan", "phrase", "needle"),
    [
        ("1. reach the mauve cube 2. grasp it", "the mauve cube", "unknown word 'mauve'"),
        ("reach the purple cube", "the purple cube", "no entity of the scene matches"),
        ("reach the blue cube", "the blue cube", "ambiguous, matches obj1 (large blue block), obj3 (small blue cube)"),
        ("juggle the red cube", "juggle the red cube", "'juggle' is not a known stage verb"),
        ("grasp it", "it", "nothing mentioned before it"),
        ("reach the red cube, grasp it, release it", "release it", "does not say where to place"),
        ("grasp the gray bowl", "the gray bowl", "a container, where object is expected"),
        ("open the red cube", "the red cube", "where drawer is expected"),
        ("lift the red cube 80 cm", "lift the red cube 80 cm", "must be in (0, 0.5] m"),
        ("push the red cube", "push the red cube", "where to push"),
        ("", "", "empty plan"),
    ],
)
def test_unmappable_plans_name_the_phrase(kitchen, plan: str, phrase: str, needle: str) -> None:
    with pytest.raises(PlanParseError) as err:
        parse_plan(plan, kitchen)
    assert err.value.phrase == phrase and needle in str(err.value)
    assert "\n" not in str(err.value)
    rec = try_parse_plan(plan, kitchen)
    assert isinstance(rec, PlanRejected) and rec.phrase == phrase and needle in rec.reason and rec.text == plan


@pytest.mark.parametrize("family", FAMILIES)
def test_canonical_plans_parse_back_to_the_goal(family: str) -> None:
    kinds = {"pick_place": ["reach", "grasp", "lift", "carry", "place"], "stack": ["reach", "grasp", "lift", "carry", "place"],
             "push": ["reach", "push"], "drawer": ["reach", "open"]}
    for seed in range(15):
        spec = sample_base(family, np.random.default_rng(seed))
        plan = canonical_plan(spec)
        prog = parse_plan(plan, spec)
        assert plan.startswith("1. reach the ")
        g = spec.goal[0]
        got = [s.kind for s in prog.stages]
        if family == "drawer" and g.value is not None and g.value <= g.tol:
            assert got == ["reach", "close"]
        else:
            assert got == kinds[family]
        assert prog.stages[-1].args == g.args
        if family == "drawer" and got[-1] == "open":
            assert prog.stages[-1].value == pytest.approx(g.value)


@pytest.mark.parametrize("family", ["pick_place", "stack", "push"])
def test_paraphrased_instruction_words_resolve_to_the_goal_entities(family: str) -> None:
    """Held-out synonyms from the scene language resolve to the same entities as the canonical words."""
    rng = np.random.default_rng(5)
    for seed in range(10):
        spec = sample_base(family, np.random.default_rng(seed))
        target = spec.object(spec.goal[0].args[0])
        words = object_phrase(target, "heldout", rng, p=1.0)
        assert words != object_phrase(target)  # really paraphrased
        prog = parse_plan(f"reach the {words}", spec)
        assert prog.stages[0].args == (target.name,), words


def test_program_json_is_validated_against_the_scene(kitchen) -> None:
    prog = StageProgram.from_json('{"stages": [{"kind": "grasp", "args": ["obj0"], "value": null}]}', kitchen)
    assert prog.describe() == "grasp(obj0)"
    with pytest.raises(ProgramError, match="argument 1 'obj9' is not an entity"):
        StageProgram.from_json('{"stages": [{"kind": "grasp", "args": ["obj9"]}]}', kitchen)
    with pytest.raises(ProgramError, match="'container0' is a container, expected object"):
        StageProgram.from_json('{"stages": [{"kind": "lift", "args": ["container0"]}]}', kitchen)
    with pytest.raises(ProgramError, match="stage 'carry' takes 2 argument"):
        StageProgram.from_json('{"stages": [{"kind": "carry", "args": ["obj0"]}]}', kitchen)
    with pytest.raises(ProgramError, match="'stages.0.kind' = 'teleport'"):
        StageProgram.from_json('{"stages": [{"kind": "teleport", "args": ["obj0"]}]}', kitchen)
    with pytest.raises(ProgramError, match="malformed"):
        StageProgram.from_json("__import__('os')", kitchen)
