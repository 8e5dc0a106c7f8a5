"""Generation programs: data in, scenes out, pure given the seed; errors name the field."""

from __future__ import annotations

import numpy as np
import pytest

from coda.scene.generators import GeneratorError, sample_base
from coda.scene.programs import GenerationProgram, ProgramError, load_program, run_program
from coda.scene.regions import REGIONS
from coda.scene.splits import make_split

PROGRAM = {
    "name": "far-left-lookalike",
    "seed": 7,
    "budget": 4,
    "base": {"family": "pick_place", "split": "sft"},
    "ops": [
        {"op": "place_in_region", "args": {"object": "target", "region": "far_left"}},
        {"op": "add_distractors", "args": {"kind": "lookalike", "region": "near_target"}},
    ],
}


def test_program_is_pure_and_applies_its_ops() -> None:
    a, b = run_program(PROGRAM), run_program(load_program(PROGRAM))
    assert [s.to_json() for s in a] == [s.to_json() for s in b]
    assert len(a) == 4 and len({s.spec_id for s in a}) == 4
    for s in a:
        assert REGIONS["far_left"].contains(*s.object(s.goal[0].args[0]).pos)
        assert s.provenance.program == "far-left-lookalike"
        assert s.provenance.factors[-1] == "distractor"
    other = run_program({**PROGRAM, "seed": 8})
    assert [s.spec_id for s in other] != [s.spec_id for s in a]


def test_program_round_trips_as_json() -> None:
    p = load_program(PROGRAM)
    assert load_program(p.to_json()) == p and len(p.program_id) == 16


def test_split_base_gives_the_split_scene_as_parent() -> None:
    sft = make_split("stack", "sft", 2, seed=7)
    out = run_program({"name": "recolour", "seed": 7, "budget": 2, "base": {"family": "stack", "split": "sft"}, "ops": [{"op": "recolor"}]})
    assert [s.provenance.parent for s in out] == [s.spec_id for s in sft]


def test_scene_list_base_edits_each_scene_in_turn() -> None:
    scenes = make_split("push", "sft", 2, seed=1)
    prog = {"name": "phys", "seed": 0, "budget": 3, "base": {"family": "push", "scenes": [s.model_dump(mode="json") for s in scenes]},
            "ops": [{"op": "scale_physics", "args": {"mass": [2, 3]}}]}
    out = run_program(prog)
    assert [s.provenance.parent for s in out] == [scenes[0].spec_id, scenes[1].spec_id, scenes[0].spec_id]
    assert all(s.objects == scenes[i % 2].objects for i, s in enumerate(out))


def test_generator_is_pure_given_rng() -> None:
    for fam in ("pick_place", "stack", "push", "drawer"):
        assert sample_base(fam, np.random.default_rng(4)).to_json() == sample_base(fam, np.random.default_rng(4)).to_json()


def test_unknown_operator_in_a_program_lists_operators() -> None:
    bad = {**PROGRAM, "ops": [{"op": "explode", "args": {}}]}
    with pytest.raises(ProgramError, match=r"program field 'ops.0'.*Unknown operator 'explode'. Available: \[.*'place_in_region'"):
        load_program(bad)


def test_bad_operator_argument_names_the_field() -> None:
    bad = {**PROGRAM, "ops": [{"op": "add_distractors", "args": {"n": 9}}]}
    with pytest.raises(ProgramError, match=r"operator 'add_distractors' field 'n'.*must be in 1..6"):
        load_program(bad)
    nested = {**PROGRAM, "ops": [{"op": "one_of", "args": {"options": [[{"op": "recolor", "args": {"colors": ["mauve"]}}]]}}]}
    with pytest.raises(ProgramError, match=r"options.0.0.*palette"):
        load_program(nested)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"budget": 0}, r"program field 'budget' = 0"),
        ({"base": {"family": "juggle"}}, r"program field 'base.family' = 'juggle'"),
        ({"base": {"family": "stack", "split": "hard"}}, r"unknown split 'hard'"),
        ({"base": {"family": "stack", "params": {"target_region": "moon"}}}, r"'target_region'.*unknown region 'moon'"),
        ({"seed": "x"}, r"program field 'seed' = 'x'"),
        ({"name": None}, r"program field 'name'"),
    ],
)
def test_bad_program_fields(change: dict, pattern: str) -> None:
    with pytest.raises(ProgramError, match=pattern):
        load_program({**PROGRAM, **change})


def test_impossible_program_reports_the_scene_and_reason() -> None:
    prog = {"name": "crowded", "seed": 0, "budget": 1, "max_attempts": 2, "base": {"family": "drawer"},
            "ops": [{"op": "place_in_region", "args": {"object": "target", "region": "near", "tries": 5}}]}
    with pytest.raises(ProgramError, match=r"scene 0 failed all 2 attempts; last error: cannot place 'drawer0' in region 'near'"):
        run_program(prog)


def test_bad_generator_params_name_the_field() -> None:
    with pytest.raises(GeneratorError, match=r"generator params field 'n_others'"):
        sample_base("pick_place", np.random.default_rng(0), {"n_others": [3, 1]})
    with pytest.raises(GeneratorError, match=r"Unknown family 'fold'. Available"):
        sample_base("fold", np.random.default_rng(0))
    assert isinstance(load_program(PROGRAM), GenerationProgram)
