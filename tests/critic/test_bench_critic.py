"""The critic bench's scoring: ground-truth factors, factor matching, the reference mode and precisions."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

from coda.critic.diagnosis import Diagnosis, DiagnosisRejected, SceneFactor
from coda.critic.trace import Release, TraceFacts
from coda.scene.spec import ScenarioSpec
from bench_module import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("critic")


def facts(spec: ScenarioSpec, **kw: Any) -> TraceFacts:
    base: dict[str, Any] = dict(
        spec=spec, steps=200, success=False, target="obj0", destination="bowl0", drawer=None, grasped={},
        lifted=frozenset(), closed_near=frozenset(), touched=frozenset(), tilted=frozenset(),
        moved={"obj0": 0.0, "obj1": 0.0}, releases=(), rests_in=None, end_dist=0.3,
        stage_kinds=("reach", "grasp", "lift", "carry", "place"), max_stage=0, phi=np.zeros(201), gripper_path=0.2,
    )
    base.update(kw)
    return TraceFacts(**base)


def factor(kind: str, entity: str | None = None, value: str = "x") -> SceneFactor:
    return SceneFactor(kind=kind, entity=entity, value=value, detail="")  # type: ignore[arg-type]


def test_true_factors_and_matching(bench: ModuleType) -> None:
    T = bench.TrueFactor
    got = bench.true_factors(("position:obj0", "robot_start", "task", "object:obj1:colour", "physics:mass", "bogus"))
    assert got == (T("position", "obj0"), T("position", None, "robot_start"), T("task"),
                   T("object_attribute", "obj1", "color"), T("physics", None, "mass"))
    assert bench.true_factors(("instruction",)) == (T("instruction"),)
    m = bench.factor_matches
    assert m(factor("task", "obj1", "blue cylinder -> red bowl"), T("task"))
    assert not m(factor("instruction", None, "put the cube"), T("task"))
    assert not m(factor("task", "obj0", "red cube"), T("instruction"))
    assert m(factor("position", "obj0", "far_left"), T("position", "obj0"))
    assert not m(factor("position", "obj1", "far_left"), T("position", "obj0"))
    assert not m(factor("region", "obj0", "far_left"), T("position", "obj0"))
    assert m(factor("position", None, "robot_start"), T("position", None, "robot_start"))
    assert not m(factor("position", "obj0", "far_left"), T("position", None, "robot_start"))
    assert m(factor("object_attribute", "obj1", "color=purple"), T("object_attribute", "obj1", "color"))
    assert not m(factor("object_attribute", "obj1", "size=large"), T("object_attribute", "obj1", "color"))
    assert m(factor("physics", None, "mass_scale=3.00"), T("physics", None, "mass"))
    assert not m(factor("physics", None, "friction_scale=0.40"), T("physics", None, "mass"))
    assert m(factor("distractor", "obj2", "blue cube"), T("distractor"))


def test_reference_mode_orders_target_progress_first(bench: ModuleType, pick_place_spec: ScenarioSpec) -> None:
    ref = bench.reference_mode
    assert ref(facts(pick_place_spec)) == "no_progress"
    assert ref(facts(pick_place_spec, gripper_path=1.5)) == "detour"
    assert ref(facts(pick_place_spec, closed_near=frozenset({"obj0"}))) == "missed_grasp"
    wrong = facts(pick_place_spec, grasped={"obj1": 5}, closed_near=frozenset({"obj0"}))
    assert ref(wrong) == "wrong_object" and bench.true_objects(wrong, "wrong_object") == {"obj0", "obj1"}
    # A tipped object counts only when the target made no progress (the privileged list puts it first).
    slipped = Release(step=50, commanded=False, over_destination=False, height=0.1, dist=0.3)
    assert ref(facts(pick_place_spec, grasped={"obj0": 30}, releases=(slipped,), tilted=frozenset({"obj1"}))) == "slip_during_transport"
    assert ref(facts(pick_place_spec, tilted=frozenset({"obj1"}))) == "knocked_over"
    near = Release(step=80, commanded=True, over_destination=False, height=0.1, dist=0.05)
    far = Release(step=80, commanded=True, over_destination=False, height=0.1, dist=0.3)
    assert ref(facts(pick_place_spec, grasped={"obj0": 30}, releases=(near,))) == "imprecise_placement"
    assert ref(facts(pick_place_spec, grasped={"obj0": 30}, releases=(far,))) == "premature_release"
    assert ref(facts(pick_place_spec, grasped={"obj0": 30}, releases=(far,), rests_in="obj1")) == "wrong_target"


def test_scores_and_precisions(bench: ModuleType, pick_place_spec: ScenarioSpec) -> None:
    tag = (bench.TrueFactor("position", "obj0"),)
    truth = bench.Truth("missed_grasp", frozenset({"obj0"}), tag, tag, True)
    d = Diagnosis(failure_mode="missed_grasp", stage_reached="reach", objects=("obj0",),
                  factors=(factor("position", "obj0", "far_left"),), explanation="e", stage_plan="1. reach obj0")
    assert bench.score(d, truth).correct
    assert bench.score(d.model_copy(update={"objects": ("obj1", "obj0")}), truth) == bench.Marks(True, False, True, True)
    # the policy also fails the paired sft scene: the split's factor did not cause the failure
    not_caused = bench.Truth("missed_grasp", frozenset({"obj0"}), (), tag, False)
    assert bench.score(d, not_caused) == bench.Marks(True, True, False, True)
    assert bench.score(DiagnosisRejected(reason="r", raw_text=""), truth) == bench.Marks(False, False, False)
    R, M = bench.Row, bench.Marks
    rows = [R("push/task/000", M(True, True, True, True), accepted=True, caused=True),
            R("push/task/001", M(True, True, True, True), accepted=False, corruption="mode", caused=True),
            R("stack/physics/000", M(False, True, False), accepted=False, corruption="factor", caused=False),
            R("drawer/physics/000", M(True, False, True), accepted=True, caused=True),
            R("drawer/physics/001", M(True, True, False, True), accepted=False, caused=False)]
    s = bench.summarize(rows)
    assert s["n"] == 5 and s["n_accepted"] == 2 and s["n_correct"] == 2 and s["n_caused"] == 3
    assert s["before"] == {"mode_precision": 0.8, "object_precision": 0.8, "factor_precision": 0.6}
    assert s["after"] == {"mode_precision": 1.0, "object_precision": 0.5, "factor_precision": 1.0}
    assert s["correct_rejected_fraction"] == 0.5
    pt = s["provenance_truth"]  # the tags count drawer/physics/001's factor as right, and its rejection as an error
    assert pt["before"]["factor_precision"] == 0.6 and pt["correct_rejected_fraction"] == 2 / 3
    assert s["corrupted"]["n"] == 2 and s["corrupted"]["rejected_fraction"] == 1.0
    assert s["by_split"]["physics"] == {"n": 3, "n_accepted": 1, "factor_before": 1 / 3, "factor_after": 1.0,
                                        "n_caused": 1}
    none = bench.summarize([R("push/task/000", M(False, False, False), accepted=False)])
    assert none["after"]["mode_precision"] is None and none["correct_rejected_fraction"] is None


def test_the_verifier_accepts_the_reference_mode(bench: ModuleType, pick_place_spec: ScenarioSpec) -> None:
    """Consistency (check a) finds the evidence of the mode the reference procedure names, including a push
    target moved away from its goal and a target lifted and held but never carried over the destination."""
    from coda.critic.verify import _mode_evidence
    from coda.scene.generators import sample_base
    from coda.scene.splits import SFT_PARAMS

    push = sample_base("push", np.random.default_rng(0), SFT_PARAMS["push"])
    t, region = push.goal[0].args
    push_kinds = ("reach", "push")
    cases = [
        facts(push, target=t, destination=region, moved={t: 0.12}, touched=frozenset({t}), end_dist=0.25,
              stage_kinds=push_kinds, max_stage=1),
        facts(push, target=t, destination=region, moved={t: 0.12}, touched=frozenset({t}), end_dist=0.25,
              stage_kinds=push_kinds, max_stage=1, gripper_path=1.5),
        facts(pick_place_spec, grasped={"obj0": 40}, lifted=frozenset({"obj0"}), moved={"obj0": 0.1}, max_stage=3),
        facts(pick_place_spec, closed_near=frozenset({"obj0"})),
        facts(pick_place_spec),
    ]
    modes = []
    for f in cases:
        mode = bench.reference_mode(f)
        d = Diagnosis(failure_mode=mode, stage_reached="none", objects=(f.target,), factors=(),
                      explanation="e", stage_plan="1. reach it")
        assert _mode_evidence(d, f) is None, (mode, _mode_evidence(d, f))
        modes.append(mode)
    assert modes == ["no_progress", "detour", "no_progress", "missed_grasp", "no_progress"]
    near = facts(push, target=t, destination=region, moved={t: 0.12}, end_dist=0.02, stage_kinds=push_kinds)
    d = Diagnosis(failure_mode="no_progress", stage_reached="none", objects=(t,), factors=(), explanation="e",
                  stage_plan="1. reach it")
    assert "from the destination" in (_mode_evidence(d, near) or "")
