"""Each registered operator's effect, its provenance, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from coda.errors import CodaError, RegistryError
from coda.scene.generators import sample_base
from coda.scene.language import canonical_instruction, heldout_only_words, object_key, tokens
from coda.scene.layout import problems
from coda.scene.operators import OPERATORS, OperatorError, apply_operator, derive
from coda.scene.regions import REGIONS, PlacementError
from coda.scene.splits import make_split


def _sft(family: str, i: int = 0):  # noqa: ANN202
    return make_split(family, "sft", 3, seed=11)[i]


def _layout(spec):  # noqa: ANN001, ANN202
    return {e.name: (getattr(e, "pos", None) or e.center) for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)}


def test_place_in_region_puts_the_target_inside() -> None:
    spec = _sft("pick_place")
    out = apply_operator(np.random.default_rng(0), spec, "place_in_region", {"object": "target", "region": "far_left"})
    target = out.goal[0].args[0]
    assert REGIONS["far_left"].contains(*out.object(target).pos)
    assert out.provenance.factors[-1] == f"position:{target}"
    assert out.provenance.operators[-1] == f"place_in_region:{target}->far_left"
    assert not problems(out)
    assert out.goal == spec.goal and out.instruction == spec.instruction


def test_place_in_a_full_region_is_a_placement_error() -> None:
    spec = _sft("drawer")
    with pytest.raises(PlacementError, match=r"cannot place 'drawer0' in region 'near' after 30 tries"):
        apply_operator(np.random.default_rng(0), spec, "place_in_region", {"object": "target", "region": "near", "tries": 30})


def test_swap_positions_exchanges_two_positions() -> None:
    spec = _sft("stack")
    top, bottom = spec.goal[0].args
    out = apply_operator(np.random.default_rng(0), spec, "swap_positions", {"a": "target", "b": "goal"})
    assert out.object(top).pos == spec.object(bottom).pos and out.object(bottom).pos == spec.object(top).pos
    assert {f"position:{top}", f"position:{bottom}"} <= set(out.provenance.factors)


def test_paraphrase_keeps_goal_and_layout() -> None:
    spec = _sft("push")
    out = apply_operator(np.random.default_rng(0), spec, "paraphrase", {"tier": "heldout"})
    assert out.instruction != spec.instruction and set(tokens(out.instruction)) & heldout_only_words()
    assert out.goal == spec.goal and _layout(out) == _layout(spec)
    assert out.provenance.factors == ("instruction",)


@pytest.mark.parametrize("family", ["pick_place", "stack", "push", "drawer"])
def test_change_task_keeps_layout_and_changes_goal(family: str) -> None:
    spec = _sft(family)
    out = apply_operator(np.random.default_rng(0), spec, "change_task", {})
    assert out.goal != spec.goal
    assert _layout(out) == _layout(spec)
    assert out.instruction == canonical_instruction(out) != spec.instruction
    assert "task" in out.provenance.factors and not problems(out)


def test_drawer_close_starts_open() -> None:
    spec = _sft("drawer")
    for seed in range(6):
        out = apply_operator(np.random.default_rng(seed), spec, "change_task", {"change": "fraction"})
        g = out.goal[0]
        assert abs(out.drawers[0].fraction - g.value) > g.tol  # never solved at reset


def test_recolor_resize_reshape_change_the_target_and_its_words() -> None:
    spec = _sft("pick_place")
    target = spec.goal[0].args[0]
    rng = np.random.default_rng(0)
    out = apply_operator(rng, spec, "recolor", {"colors": ["pink"]})
    assert out.object(target).color == "pink" and "pink" in out.instruction
    assert out.provenance.factors == (f"object:{target}:color",)
    out = apply_operator(rng, spec, "resize", {"half": [0.015, 0.016]})
    assert 0.015 <= min(out.object(target).size[:2]) <= 0.0161
    out = apply_operator(rng, spec, "reshape", {"shapes": ["cylinder"]})
    assert out.object(target).shape == "cylinder" and "cylinder" in out.instruction


def test_object_edit_after_paraphrase_is_refused() -> None:
    spec = apply_operator(np.random.default_rng(0), _sft("pick_place"), "paraphrase", {"tier": "train"})
    with pytest.raises(OperatorError, match="apply 'paraphrase' after 'recolor'"):
        apply_operator(np.random.default_rng(0), spec, "recolor", {"colors": ["pink"]})


def test_stack_goal_objects_stay_boxes() -> None:
    with pytest.raises(OperatorError, match="reshape: no shape"):
        apply_operator(np.random.default_rng(0), _sft("stack"), "reshape", {"shapes": ["cylinder", "sphere"]})


@pytest.mark.parametrize("kind", ["lookalike", "random"])
def test_add_distractors_adds_distinguishable_objects(kind: str) -> None:
    spec = _sft("pick_place")
    out = apply_operator(np.random.default_rng(0), spec, "add_distractors", {"n": 2, "kind": kind})
    assert len(out.objects) == len(spec.objects) + 2
    keys = [object_key(o) for o in out.objects]
    assert len(set(keys)) == len(keys)
    target = out.object(out.goal[0].args[0])
    if kind == "lookalike":
        for o in out.objects[-2:]:
            assert o.color == target.color or o.shape == target.shape
    assert out.goal == spec.goal and "distractor" in out.provenance.factors and not problems(out)


def test_scale_physics_and_robot_start() -> None:
    spec = _sft("stack")
    out = apply_operator(np.random.default_rng(0), spec, "scale_physics", {"friction": [0.3, 0.5], "mass": [2, 3]})
    assert 0.3 <= out.physics.friction_scale <= 0.5 and 2 <= out.physics.mass_scale <= 3
    assert out.provenance.factors == ("physics:friction", "physics:mass")
    out = apply_operator(np.random.default_rng(0), spec, "move_robot_start", {"dy": [0.1, 0.1], "dx": [0, 0], "dz": [0, 0]})
    assert out.robot.pos[1] == pytest.approx(spec.robot.pos[1] + 0.1) and out.provenance.factors == ("robot_start",)


def test_operators_are_pure_given_the_rng() -> None:
    spec = _sft("push")
    args = {"n": [1, 3], "kind": "random"}
    a = apply_operator(np.random.default_rng(5), spec, "add_distractors", args)
    b = apply_operator(np.random.default_rng(5), spec, "add_distractors", args)
    assert a.to_json() == b.to_json()


def test_derive_records_the_parent() -> None:
    spec = _sft("drawer")
    out = derive(np.random.default_rng(0), spec, [("recolor", {}), ("paraphrase", {})])
    assert out.provenance.parent == spec.spec_id
    assert out.provenance.operators[-2].startswith("recolor:") and out.provenance.operators[-1] == "paraphrase:train"


def test_unknown_operator_lists_available() -> None:
    with pytest.raises(RegistryError) as e:
        apply_operator(np.random.default_rng(0), _sft("stack"), "teleport", {})
    msg = str(e.value)
    assert "Unknown operator 'teleport'" in msg and all(n in msg for n in OPERATORS.names())


@pytest.mark.parametrize(
    ("op", "args", "pattern"),
    [
        ("place_in_region", {"region": "moon"}, r"'region'.*unknown region \['moon'\].*far_left"),
        ("place_in_region", {"region": "far", "speed": 3}, r"'speed' is not a known field"),
        ("recolor", {"colors": ["mauve"]}, r"'colors'.*palette"),
        ("resize", {}, r"exactly one of 'scale' or 'half'"),
        ("scale_physics", {"friction": [2.0, 1.0]}, r"low <= high"),
        ("paraphrase", {"tier": "secret"}, r"'tier' = 'secret'"),
    ],
)
def test_bad_arguments_name_the_field(op: str, args: dict, pattern: str) -> None:
    with pytest.raises(CodaError, match=pattern):
        apply_operator(np.random.default_rng(0), _sft("pick_place"), op, args)


def test_unknown_reference_lists_references() -> None:
    with pytest.raises(OperatorError, match=r"unknown entity reference 'obj99'.*'target'"):
        apply_operator(np.random.default_rng(0), _sft("pick_place"), "recolor", {"object": "obj99"})
