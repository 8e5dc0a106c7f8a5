"""Compiling failure modes: generation programs that carry the factor and widen with the level, lineage,
training programs with a voted staged potential, and errors that name the field."""

from __future__ import annotations

import json

import pytest

from coda.critic.diagnosis import Diagnosis
from coda.engine.compile import (
    CompileError,
    TrainingProgramBody,
    bind_potential,
    compile_training_program,
    corrective_start,
    load_training_program,
    next_level,
    plan_template,
)
from coda.engine.modes import Mode
from coda.sim.backends import sim_backend
from coda.sim.tabletop.programs import ModeProgram, compile_generation_program
from coda.sim.tabletop.programs import child_program as _child_program
from coda.sim.tabletop.widening import neighbourhood
from coda.scene.programs import GenerationProgram, load_program, run_program
from coda.scene.language import canonical_instruction
from coda.scene.regions import REGIONS, grid_region_of
from coda.scene.spec import ObjectSpec, ScenarioSpec
from coda.scene.splits import make_split
from coda.shaping.resolve import entity_words
from coda.shaping.text2potential import canonical_plan, parse_plan

FAR_LEFT = "missed_grasp|position:far_left"
ROLES = sim_backend("tabletop").entity_roles


def child_program(parent: ModeProgram, outcome: str, max_level: int = 3, **kw: int) -> ModeProgram:
    """The next program as CoDA's planner makes it: the level by the outcome, the scenes by the tabletop."""
    return _child_program(parent, *next_level(parent.level, outcome, max_level), **kw)


def _template_of(plan: str, spec: ScenarioSpec):  # type: ignore[no-untyped-def]
    return plan_template(plan, spec, ROLES(spec))


def _target(s: ScenarioSpec) -> ObjectSpec:
    e = s.entity(s.goal[0].args[0])
    assert isinstance(e, ObjectSpec)
    return e


def test_level_zero_scenes_carry_the_factor() -> None:
    mp = compile_generation_program(Mode.from_key(FAR_LEFT), (), "pick_place", seed=7, budget=10, level=0)
    assert isinstance(mp.program, GenerationProgram)
    assert load_program(mp.program.to_json()) == mp.program  # plain data: survives a JSON round trip
    assert mp.program.base.params is not None and mp.program.base.params["target_region"] == "spot_left"  # sft base
    scenes = run_program(mp.program)
    assert len(scenes) == 10
    for s in scenes:
        t = _target(s)
        assert REGIONS["far_left"].contains(*t.pos), t.pos
        assert s.provenance.program == mp.key and f"position:{t.name}" in s.provenance.factors
    assert [s.spec_id for s in run_program(mp.program)] == [s.spec_id for s in scenes]  # same seed, same scenes
    other = compile_generation_program(FAR_LEFT, (), "pick_place", seed=8, budget=10, level=0)
    assert [s.spec_id for s in run_program(other.program)] != [s.spec_id for s in scenes]


def test_entities_of_several_position_factors_are_placed_together() -> None:
    # push trains its goal region where a `far` target must go and its target where a `center` goal must go:
    # one after the other, neither placement fits
    key = "no_progress|position:far+position@goal:center"
    for level in (0, 1):
        mp = compile_generation_program(key, (), "push", seed=1, budget=8, level=level)
        (op,) = [o for o in mp.program.model_dump(mode="json")["ops"] if o["op"].startswith("place")]
        assert op["op"] == "place_together" and [p["object"] for p in op["args"]["places"]] == ["target", "goal"]
    mp = compile_generation_program(key, (), "push", seed=1, budget=8, level=0)
    scenes = run_program(mp.program)
    assert len(scenes) == 8
    for s in scenes:
        assert REGIONS["far"].contains(*_target(s).pos) and REGIONS["center"].contains(*s.entity(s.goal[0].args[1]).center)


def test_wider_levels_vary_more() -> None:
    cells, extras = [], []
    for level in range(3):
        mp = compile_generation_program(FAR_LEFT, (), "pick_place", seed=3, budget=16, level=level)
        scenes = run_program(mp.program)
        cells.append({grid_region_of(*_target(s).pos) for s in scenes})
        extras.append(sum(bool({"robot_start", "distractor", "physics:friction", "instruction"} & set(s.provenance.factors))
                          for s in scenes))
    assert cells[0] == {"far_left"}
    assert cells[1] <= {"far_left", "far", "left"} and len(cells[1]) >= 2
    assert len(cells[2]) > len(cells[1])
    assert extras[0] == extras[1] == 0 and extras[2] >= 3  # combined factors from level 2 on
    assert neighbourhood("spot_far_left", 1) == ["spot_far_left", "far_left"]
    assert neighbourhood("far_left", 1) == ["far_left", "far", "left"]


def test_colour_factor_and_its_widening() -> None:
    key = "wrong_object|object:color=purple"
    narrow = run_program(compile_generation_program(key, (), "pick_place", 1, 8, 0).program)
    assert {_target(s).color for s in narrow} == {"purple"}
    wide = run_program(compile_generation_program(key, (), "pick_place", 1, 12, 2).program)
    assert len({_target(s).color for s in wide}) > 1


def test_instruction_mode_rewords_and_changes_tasks_when_wider() -> None:
    sft = make_split("pick_place", "sft", 1, 0)[0]
    narrow = run_program(compile_generation_program("wrong_object|instruction", [sft], "pick_place", 2, 6, 0).program)
    assert all(s.provenance.factors[-1] == "instruction" and "task" not in s.provenance.factors for s in narrow)
    wide = run_program(compile_generation_program("wrong_object|instruction", [sft], "pick_place", 2, 12, 2).program)
    assert any("task" in s.provenance.factors for s in wide)
    assert all("instruction" in s.provenance.factors for s in wide)  # the wording edit still comes last


def test_task_mode_asks_for_other_goals_in_the_same_layouts() -> None:
    mp = compile_generation_program("wrong_object|task", (), "pick_place", 4, 8, 0)
    assert [(o.op, o.args) for o in mp.program.ops] == [("change_task", {"change": "any"})]
    scenes = run_program(mp.program)
    base = run_program(mp.program.model_copy(update={"ops": ()}))  # the same draws without the factor
    for s, b in zip(scenes, base, strict=True):
        assert [o.pos for o in s.objects] == [o.pos for o in b.objects] and s.goal[0] != b.goal[0]
        assert s.instruction == canonical_instruction(s) != b.instruction
        assert s.provenance.factors == ("task",)
    assert len({entity_words(s.entity(s.goal[0].args[0])) for s in scenes}) > 1  # varying targets
    wide = run_program(compile_generation_program("wrong_object|task", (), "pick_place", 4, 12, 2).program)
    assert all(s.provenance.factors[0] == "task" for s in wide)
    reworded = [s for s in wide if "instruction" in s.provenance.factors]
    assert reworded and all(s.provenance.factors[-1] == "instruction" for s in reworded)  # rewording comes last
    both = run_program(compile_generation_program("wrong_object|instruction+task", (), "stack", 1, 6, 3).program)
    assert all({"task", "instruction"} <= set(s.provenance.factors) for s in both)


@pytest.mark.parametrize(
    ("family", "keys"),
    [
        ("pick_place", ["imprecise_placement|position@goal:far_right", "slip_during_transport|object:size=small+physics:friction=low",
                        "missed_grasp|object:shape=cylinder", "wrong_object|distractor", "detour|position:robot_start",
                        "slip_during_transport|physics:mass=high", "wrong_target|position@alt:near_left"]),
        ("stack", ["wrong_target|object@goal:color=orange", "wrong_object|distractor+instruction"]),
        ("push", ["no_progress|position:near", "wrong_target|position@goal:left", "detour|physics:friction=high",
                  "wrong_object|distractor+task"]),
        ("drawer", ["drawer_not_operated|position:far_left", "drawer_not_operated|physics:damping",
                    "drawer_not_operated|instruction+object:color=black", "drawer_not_operated|task"]),
    ],
)
def test_every_family_compiles_and_runs_at_every_level(family: str, keys: list[str]) -> None:
    for key in keys:
        for level in (0, 3):
            mp = compile_generation_program(key, (), family, seed=level, budget=2, level=level)
            assert all(s.family == family for s in run_program(mp.program)), key


def test_compile_errors_name_the_field() -> None:
    with pytest.raises(CompileError, match="mode = 'missed_grasp|position:moon': token 'position:moon': region 'moon'"):
        compile_generation_program("missed_grasp|position:moon", (), "pick_place", 0, 4)
    with pytest.raises(CompileError, match="mode = 'no_progress' has no verified factor"):
        compile_generation_program("no_progress", (), "pick_place", 0, 4)
    with pytest.raises(CompileError, match="'position@alt:far_left' concerns the 'alt' entity, which stack scenes lack"):
        compile_generation_program("wrong_target|position@alt:far_left", (), "stack", 0, 4)
    with pytest.raises(CompileError, match="cannot carry it"):  # a drawer cabinet is not an object to resize
        compile_generation_program("missed_grasp|object:size=small", (), "drawer", 0, 4)
    with pytest.raises(CompileError, match="family = 'kitchen' is unknown"):
        compile_generation_program(FAR_LEFT, (), "kitchen", 0, 4)
    with pytest.raises(CompileError, match="budget = 0 must be a positive integer"):
        compile_generation_program(FAR_LEFT, (), "pick_place", 0, 0)
    with pytest.raises(CompileError, match="level = 9 must be an integer"):
        compile_generation_program(FAR_LEFT, (), "pick_place", 0, 4, 9)
    with pytest.raises(CompileError, match="seed = -1"):
        compile_generation_program(FAR_LEFT, (), "pick_place", -1, 4)


def test_children_move_level_by_outcome_and_keep_lineage() -> None:
    root = compile_generation_program(FAR_LEFT, (), "pick_place", 5, 6, 1)
    harder = child_program(root, "solved", max_level=3)
    assert (harder.level, harder.parent, harder.mode) == (2, root.key, FAR_LEFT)
    assert harder.program.budget == 6 and harder.program.seed != root.program.seed
    easier = child_program(root, "stuck")
    assert (easier.level, easier.parent, easier.rediagnose) == (0, root.key, False)
    flagged = child_program(easier, "stuck")
    assert (flagged.level, flagged.rediagnose, flagged.parent) == (0, True, easier.key)
    same = child_program(root, "active", budget=3)
    assert (same.level, same.program.budget) == (1, 3) and same.key != root.key
    top = child_program(child_program(harder, "solved", max_level=3), "solved", max_level=3)
    assert top.level == 3 and "widest" in top.reason
    assert child_program(root, "solved") == child_program(root, "solved")  # deterministic child seeds
    body = json.loads(json.dumps(harder.body()))
    assert {"parent", "level", "mode"} <= set(body) and ModeProgram.from_body(body) == harder
    assert len(run_program(harder.program)) == 6
    with pytest.raises(CompileError, match="outcome = 'great' must be one of"):
        child_program(root, "great")
    with pytest.raises(CompileError, match="generation program body field 'level' = -1"):
        ModeProgram.from_body({**body, "level": -1})


def _diag(i: int, spec: ScenarioSpec, plan: str, mode: str = "missed_grasp") -> Diagnosis:
    return Diagnosis(failure_mode=mode, stage_reached="reach", objects=(), factors=(), explanation="missed",  # type: ignore[arg-type]
                     stage_plan=plan, episode_id=f"ep{i}", critic="test")


def test_training_program_votes_for_the_most_common_compiling_plan() -> None:
    scenes = make_split("pick_place", "sft", 4, 11)
    short = "1. reach the cube 2. grasp it 3. lift it"
    diags = [_diag(0, scenes[0], "dance around the table"), _diag(1, scenes[1], canonical_plan(scenes[1])),
             _diag(2, scenes[2], canonical_plan(scenes[2])), _diag(3, scenes[3], short.replace("cube", entity_words(_target(scenes[3]))))]
    body = compile_training_program(FAR_LEFT, diags, "pick_place/x@L0s1", scenes={f"ep{i}": s for i, s in enumerate(scenes)},
                                    expert_demos=12, start_steps={"ep2": 30}, template_of=_template_of)
    assert json.loads(json.dumps(body)) == body
    tp = load_training_program(body)
    assert isinstance(tp, TrainingProgramBody)
    assert (tp.plans_compiled, tp.potential_votes, tp.potential_episode) == (3, 2, "ep1")
    assert [s.kind for s in tp.potential_template or ()] == ["reach", "grasp", "lift", "carry", "place"]
    assert tp.potential == parse_plan(canonical_plan(scenes[1]), scenes[1]).model_dump(mode="json")
    assert [(c.episode_id, c.start_step) for c in tp.corrective] == [("ep0", 0), ("ep1", 0), ("ep2", 30), ("ep3", 0)]
    assert tp.expert_demos == 12 and tp.generation_program == "pick_place/x@L0s1"
    # the role template binds to a generated scene of the mode
    gen = run_program(compile_generation_program(FAR_LEFT, (), "pick_place", 0, 1).program)[0]
    bound = bind_potential(tp.potential_template or (), gen, ROLES(gen))
    assert bound.stages[0].args == (gen.goal[0].args[0],) and bound.stages[-1].args == tuple(gen.goal[0].args)


def test_training_program_without_a_compiling_plan_and_errors() -> None:
    s = make_split("pick_place", "sft", 1, 0)[0]
    body = compile_training_program(FAR_LEFT, [_diag(0, s, "wiggle")], "k", scenes={"ep0": s}, expert_demos=0,
                                    template_of=_template_of)
    assert body["potential"] is None and "no stage plan compiles" in body["potential_reason"]
    with pytest.raises(CompileError, match=r"diagnoses\[0\].failure_mode = 'detour' does not belong"):
        compile_training_program(FAR_LEFT, [_diag(0, s, "x", "detour")], "k", scenes={"ep0": s}, expert_demos=1,
                                 template_of=_template_of)
    with pytest.raises(CompileError, match=r"diagnoses\[0\].episode_id = 'ep0' has no scene"):
        compile_training_program(FAR_LEFT, [_diag(0, s, "x")], "k", scenes={}, expert_demos=1, template_of=_template_of)
    with pytest.raises(CompileError, match="expert_demos = -2"):
        compile_training_program(FAR_LEFT, [], "k", scenes={}, expert_demos=-2, template_of=_template_of)
    with pytest.raises(CompileError, match=r"start_steps\['ep0'\] = -5"):
        compile_training_program(FAR_LEFT, [_diag(0, s, "x")], "k", scenes={"ep0": s}, expert_demos=1, start_steps={"ep0": -5},
                                 template_of=_template_of)
    with pytest.raises(CompileError, match="training program field 'weights': .* must not all be 0"):
        load_training_program({**body, "weights": {"expert": 0, "corrective": 0, "replay": 0}})


def test_corrective_start_backs_off_from_the_last_progress() -> None:
    assert corrective_start([0.0, 0.2, 0.4, 0.4, 0.3, 0.1], back=1) == 1
    assert corrective_start([0.5, 0.1], back=5) == 0
    assert corrective_start([], back=3) == 0


def test_a_child_program_finds_its_stored_parent() -> None:
    """The round stores each program's record with its parent's id: a compiled child names its parent by the
    scene program's name, LIBERO's planner by the record key; both resolve (`program_ids`)."""
    from types import SimpleNamespace

    from coda.engine.curriculum import program_ids

    root = compile_generation_program(FAR_LEFT, (), "pick_place", 5, 6, 1)
    child = child_program(root, "solved")
    def source(mp: ModeProgram) -> dict:  # a generation source as the planner writes it
        return json.loads(json.dumps({"kind": "program", "program": mp.program.model_dump(mode="json"),
                                      "mode_program": mp.body(), "mode": mp.mode}))

    stored = [SimpleNamespace(key="mode0_r1", id=7, body=source(root)),
              SimpleNamespace(key="fill_r1", id=8, body={"kind": "dr"})]
    ids = program_ids(stored)
    assert ids[source(child)["mode_program"]["parent"]] == 7 and ids["mode0_r1"] == 7 and ids["fill_r1"] == 8
    assert None not in ids and "None" not in ids
