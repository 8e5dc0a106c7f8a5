"""Failure modes: keys from verified factors, MiniLM merging of paraphrased explanations, determinism, errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coda.critic.diagnosis import Diagnosis, SceneFactor
from coda.critic.verify import Verdict
from coda.engine.modes import Mode, ModeAssignment, ModeError, cluster, factor_kinds, mode_key, parse_mode_key
from coda.sim import backends
from coda.sim.tabletop.factors import entity_for_role, role_of
from coda.sim.tabletop.tokens import factor_token
from coda.policy.text import HashingTextEncoder, TextEncoder
from coda.scene.spec import ScenarioSpec
from coda.scene.splits import make_split

PLAN = "1. reach the cube 2. grasp it"
TABLETOP = backends.sim_backend("tabletop")


@pytest.fixture(scope="module")
def minilm() -> Iterator[TextEncoder]:
    """The real sentence embedder, loaded once for this module."""
    yield TextEncoder()


@pytest.fixture(scope="module")
def scenes() -> list[ScenarioSpec]:
    return make_split("pick_place", "sft", 8, seed=3)


def _factor(kind: str, value: str, entity: str | None = None) -> SceneFactor:
    return SceneFactor(kind=kind, entity=entity, value=value, detail="")  # type: ignore[arg-type]


def _pair(i: int, mode: str, factors: list[SceneFactor], explanation: str, accepted: bool = True) -> tuple[Diagnosis, Verdict]:
    eid = f"ep{i}"
    d = Diagnosis(failure_mode=mode, stage_reached="reach", objects=(), factors=tuple(factors),  # type: ignore[arg-type]
                  explanation=explanation, stage_plan=PLAN, episode_id=eid, critic="test")
    v = Verdict(episode_id=eid, critic="test", failure_mode=mode, accepted=accepted, checks=(),
                verified_factors=tuple(factors) if accepted else (), reasons=() if accepted else ("counterfactual: no factor",))
    return d, v


MISSED_A = "The gripper closed beside the cube in the far-left corner and never held it."
MISSED_A2 = "The gripper shut next to the far-left cube without grasping it."
SLIPPED = "The small cube slipped between the fingers because it is too narrow."
WRONG = "The policy picked up the blue block instead of the red one named in the instruction."
WRONG2 = "It grabbed the wrong object: the blue cube rather than the red cube the instruction asks for."


def _batch(scenes: list[ScenarioSpec]) -> tuple[list[Diagnosis], list[Verdict], dict[str, ScenarioSpec]]:
    t = [s.goal[0].args[0] for s in scenes]
    rows = [
        _pair(0, "missed_grasp", [_factor("position", "far_left", t[0])], MISSED_A),
        _pair(1, "missed_grasp", [_factor("position", "far", t[1])], MISSED_A2),  # another key, a paraphrase
        _pair(2, "missed_grasp", [_factor("object_attribute", "size=small", t[2])], SLIPPED),
        _pair(3, "wrong_object", [_factor("instruction", "put the red cube in the tray")], WRONG),
        _pair(4, "wrong_object", [_factor("instruction", "place the red block into the tray")], WRONG2),
        _pair(5, "knocked_over", [_factor("position", "far_left", t[5])], MISSED_A),  # same words, other failure
        _pair(6, "missed_grasp", [_factor("position", "far_left", t[6])], MISSED_A, accepted=False),
    ]
    ds, vs = [r[0] for r in rows], [r[1] for r in rows]
    return ds, vs, {f"ep{i}": s for i, s in enumerate(scenes[: len(rows)])}


def test_paraphrases_merge_and_different_modes_stay_apart(minilm: TextEncoder, scenes: list[ScenarioSpec]) -> None:
    ds, vs, sc = _batch(scenes)
    a = cluster(ds, vs, [], minilm, vocabulary=TABLETOP, scenes=sc, threshold=0.8)
    assert a.raw_keys[0] == "missed_grasp|position:far_left" and a.raw_keys[1] == "missed_grasp|position:far"
    assert a.mode_of[0] == a.mode_of[1] == "missed_grasp|position:far"  # first in key order founds the mode
    assert 0 in a.similarity and a.similarity[0] >= 0.8  # merged by the embedding, not by the key
    assert a.mode_of[2] == "missed_grasp|object:size=small"  # same failure mode, other explanation
    assert a.mode_of[3] == a.mode_of[4] == "wrong_object|instruction"
    assert a.mode_of[5] == "knocked_over|position:far_left"  # identical words never cross failure modes
    assert a.mode_of[6] is None and "not accepted" in a.skipped[6]
    assert set(a.new) == set(a.modes) == {"missed_grasp|position:far", "missed_grasp|object:size=small",
                                          "wrong_object|instruction", "knocked_over|position:far_left"}
    merged = a.modes["missed_grasp|position:far"]
    assert merged.episodes == ("ep0", "ep1") and merged.description in (MISSED_A, MISSED_A2)
    assert merged.embedding is not None and len(merged.embedding) == 384
    # the same words under another factor axis never merge: the axis decides what gets generated
    assert factor_kinds("missed_grasp|position@goal:far+task") == {"position", "task"}
    assert factor_kinds("no_progress") == frozenset()
    task = [_pair(0, "wrong_object", [_factor("instruction", "put the red cube in the tray")], WRONG),
            _pair(1, "wrong_object", [_factor("distractor", "red cube", scenes[1].objects[-1].name)], WRONG)]
    split = cluster([d for d, _ in task], [v for _, v in task], [], minilm, vocabulary=TABLETOP, scenes=sc, threshold=0.5)
    assert list(split.mode_of) == ["wrong_object|instruction", "wrong_object|distractor"]
    # a strict threshold keeps the two keys apart: the merge above came from the similarity
    strict = cluster(ds, vs, [], minilm, vocabulary=TABLETOP, scenes=sc, threshold=0.99)
    assert strict.mode_of[0] != strict.mode_of[1]


def test_existing_modes_absorb_new_diagnoses(minilm: TextEncoder, scenes: list[ScenarioSpec]) -> None:
    ds, vs, sc = _batch(scenes)
    first = cluster(ds, vs, [], minilm, vocabulary=TABLETOP, scenes=sc)
    # as the round loop would read them back from memory: key, description, embedding
    stored = [Mode.from_key(**m.record_fields()) for m in first.modes.values()]
    t = scenes[7].goal[0].args[0]
    d, v = _pair(7, "missed_grasp", [_factor("position", "spot_far_left", t)],
                 "The gripper closed next to the cube in the far-left corner but never held it.")
    d2, v2 = _pair(8, "wrong_object", [_factor("instruction", "x")], WRONG)
    second = cluster([d, d2], [v, v2], stored, minilm, vocabulary=TABLETOP, scenes={"ep7": scenes[7]})
    assert second.raw_keys[0] == "missed_grasp|position:spot_far_left"
    assert second.mode_of == ("missed_grasp|position:far", "wrong_object|instruction")
    assert second.new == ()
    assert second.modes["wrong_object|instruction"].embedding == first.modes["wrong_object|instruction"].embedding


def test_clustering_is_deterministic_and_order_free(minilm: TextEncoder, scenes: list[ScenarioSpec]) -> None:
    ds, vs, sc = _batch(scenes)
    a = cluster(ds, vs, [], minilm, vocabulary=TABLETOP, scenes=sc)
    assert cluster(ds, vs, [], minilm, vocabulary=TABLETOP, scenes=sc) == a
    order = [4, 2, 6, 0, 5, 3, 1]
    b = cluster([ds[i] for i in order], [vs[i] for i in order], [], minilm, vocabulary=TABLETOP, scenes=sc)
    assert [b.mode_of[order.index(i)] for i in range(len(ds))] == list(a.mode_of)
    assert b.new == a.new


def test_factor_tokens_use_roles_and_carry_over(scenes: list[ScenarioSpec]) -> None:
    s = scenes[0]
    target, goal = s.goal[0].args
    alt = entity_for_role("alt", s)
    assert role_of(target, s) == "target" and role_of(goal, s) == "goal" and alt is not None and role_of(alt, s) == "alt"
    assert factor_token(_factor("position", "far_left", target), s) == "position:far_left"
    assert factor_token(_factor("region", "far_right", goal), s) == "position@goal:far_right"
    assert factor_token(_factor("position", "0.15,0.15", target), s) == "position:far_left"  # metres -> grid cell
    assert factor_token(_factor("position", "robot_start"), s) == "position:robot_start"
    assert factor_token(_factor("object_attribute", "Colour = Red", goal), s) == "object@goal:color=red"
    assert factor_token(_factor("physics", "friction_scale=0.40")) == "physics:friction=low"
    assert factor_token(_factor("physics", "mass_scale=3")) == "physics:mass=high"
    assert factor_token(_factor("distractor", "small red cube", alt), s) == "distractor"
    assert factor_token(_factor("task", "blue cylinder -> blue bowl", alt), s) == "task"
    assert factor_token(_factor("instruction", "the crimson block"), s) == "instruction"
    assert parse_mode_key("wrong_object|instruction+task") == ("wrong_object", ("instruction", "task"))
    assert mode_key("slip_during_transport", ["physics:friction=low", "object:size=small", "physics:friction=low"]) == \
        "slip_during_transport|object:size=small+physics:friction=low"
    assert mode_key("no_progress", []) == "no_progress"
    assert parse_mode_key("imprecise_placement|position@goal:far_right") == ("imprecise_placement", ("position@goal:far_right",))


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("bogus|position:far_left", "failure mode 'bogus' is unknown"),
        ("missed_grasp|position:moon", "region 'moon'"),
        ("missed_grasp|object:color=red+distractor", "unique and sorted"),
        ("missed_grasp|", "followed by factor tokens"),
        ("missed_grasp|physics:gravity=low", "physics value"),
        ("missed_grasp|instruction@goal", "role 'goal'"),
        ("wrong_object|task:red_cube", "'task' takes no value"),
    ],
)
def test_bad_mode_keys_name_the_field(key: str, words: str) -> None:
    with pytest.raises(ModeError, match="mode = ") as e:
        parse_mode_key(key, vocabulary=TABLETOP)
    assert words in str(e.value)


def test_bad_cluster_inputs_fail_naming_the_field(scenes: list[ScenarioSpec]) -> None:
    enc = HashingTextEncoder()
    ds, vs, sc = _batch(scenes)
    with pytest.raises(ModeError, match="verdicts has 6 entries for 7 diagnoses"):
        cluster(ds, vs[:-1], [], enc, vocabulary=TABLETOP, scenes=sc)
    other = vs[1].model_copy(update={"episode_id": "ep9"})
    with pytest.raises(ModeError, match=r"verdicts\[0\].episode_id = 'ep9'"):
        cluster(ds[:1], [other], [], enc, vocabulary=TABLETOP, scenes=sc)
    with pytest.raises(ModeError, match=r"verdicts\[0\].verified_factors\[0\].entity = '\w+': no scene"):
        cluster(ds[:1], vs[:1], [], enc, vocabulary=TABLETOP, scenes={})
    with pytest.raises(ModeError, match="threshold = 1.5"):
        cluster(ds, vs, [], enc, vocabulary=TABLETOP, scenes=sc, threshold=1.5)
    dup = Mode.from_key("no_progress")
    with pytest.raises(ModeError, match=r"existing_modes\[1\].key = 'no_progress' appears twice"):
        cluster(ds, vs, [dup, dup], enc, vocabulary=TABLETOP, scenes=sc)
    bad = _factor("position", "somewhere", scenes[0].goal[0].args[0])
    d, v = _pair(0, "missed_grasp", [bad], MISSED_A)
    with pytest.raises(ModeError, match=r"value = 'somewhere' is neither a region name"):
        cluster([d], [v], [], enc, vocabulary=TABLETOP, scenes={"ep0": scenes[0]})


def test_empty_input_gives_an_empty_assignment() -> None:
    a = cluster([], [], [Mode.from_key("no_progress")], HashingTextEncoder(), vocabulary=TABLETOP)
    assert a == ModeAssignment(mode_of=(), raw_keys=())


def test_task_factors_key_their_own_mode(scenes: list[ScenarioSpec]) -> None:
    s = scenes[0]
    other = next(o.name for o in s.objects if o.name != s.goal[0].args[0])
    d1, v1 = _pair(0, "wrong_object", [_factor("task", "blue cylinder -> blue bowl", other)], WRONG)
    d2, v2 = _pair(1, "wrong_object", [_factor("instruction", "the crimson block")], "The policy misread the wording.")
    a = cluster([d1, d2], [v1, v2], [], HashingTextEncoder(), vocabulary=TABLETOP, scenes={"ep0": s, "ep1": scenes[1]}, threshold=0.99)
    assert a.raw_keys == ("wrong_object|task", "wrong_object|instruction")
    assert a.mode_of == a.raw_keys and set(a.new) == {"wrong_object|task", "wrong_object|instruction"}
