"""Random scene edits: the explicit mutation space, provenance, determinism, domain randomisation, errors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from coda.engine.mutate import (
    ARG_SAMPLERS,
    EXCLUDED_OPERATORS,
    MUTATION_OPERATORS,
    MutationError,
    dr_scene,
    mutate,
    random_edit,
)
from coda.errors import CodaError
from coda.scene.generators import sample_base
from coda.scene.language import heldout_only_words, tokens
from coda.scene.layout import problems
from coda.scene.operators import OPERATORS
from coda.scene.spec import FAMILIES, ScenarioSpec
from coda.scene.splits import SFT_PARAMS, make_split


def _content(spec: ScenarioSpec) -> dict[str, object]:
    """Everything but the provenance: what the simulator builds."""
    return spec.model_dump(exclude={"provenance"})


def _op_names(spec: ScenarioSpec) -> list[str]:
    return [entry.split(":")[0] for entry in spec.provenance.operators]


@pytest.fixture(scope="module")
def sft() -> dict[str, list[ScenarioSpec]]:
    return {f: make_split(f, "sft", 3, seed=5) for f in FAMILIES}


def test_mutation_space_is_explicit_and_complete() -> None:
    assert isinstance(MUTATION_OPERATORS, tuple) and len(set(MUTATION_OPERATORS)) == len(MUTATION_OPERATORS)
    assert set(ARG_SAMPLERS) == set(MUTATION_OPERATORS)
    assert not set(MUTATION_OPERATORS) & set(EXCLUDED_OPERATORS)
    # a newly registered operator must be put in one list or the other on purpose
    assert set(OPERATORS.names()) == set(MUTATION_OPERATORS) | set(EXCLUDED_OPERATORS)


@pytest.mark.parametrize("family", FAMILIES)
def test_mutate_changes_the_scene_and_records_every_edit(sft: dict[str, list[ScenarioSpec]], family: str) -> None:
    for k, parent in enumerate(sft[family]):
        for n_edits in (1, 3):
            child = mutate(np.random.default_rng([k, n_edits]), parent, n_edits)
            assert _content(child) != _content(parent)
            ops = child.provenance.operators
            assert ops[: len(parent.provenance.operators)] == parent.provenance.operators
            added = _op_names(child)[len(parent.provenance.operators):]
            assert len(added) == n_edits and set(added) <= set(MUTATION_OPERATORS)
            assert child.provenance.parent == parent.spec_id
            assert child.provenance.program == "mutate" and child.provenance.split is None
            assert not problems(child), problems(child)


def test_mutate_is_pure_given_the_rng(sft: dict[str, list[ScenarioSpec]]) -> None:
    parent = sft["pick_place"][0]
    a = [mutate(np.random.default_rng(s), parent, 3).to_json() for s in range(6)]
    b = [mutate(np.random.default_rng(s), parent, 3).to_json() for s in range(6)]
    assert a == b
    assert len(set(a)) == 6  # different seeds, different children


def test_dr_scene_is_pure_given_the_rng() -> None:
    for family in FAMILIES:
        a = dr_scene(np.random.default_rng(9), family, 2).to_json()
        assert a == dr_scene(np.random.default_rng(9), family, 2).to_json()
        assert a != dr_scene(np.random.default_rng(10), family, 2).to_json()


def test_dr_scene_draws_edits_over_all_operators() -> None:
    counts: Counter[str] = Counter()
    n = 0
    for family in FAMILIES:
        for seed in range(25):
            spec = dr_scene(np.random.default_rng([seed]), family, 1)
            assert spec.family == family and spec.provenance.program == "dr"
            assert len(spec.provenance.operators) == 2 and _op_names(spec)[0] == "base"
            counts[_op_names(spec)[1]] += 1
            n += 1
    assert set(counts) == set(MUTATION_OPERATORS), counts
    expected = n / len(MUTATION_OPERATORS)
    assert max(counts.values()) <= 2.5 * expected and min(counts.values()) >= expected / 4, counts


@pytest.mark.parametrize("family", FAMILIES)
def test_dr_base_is_the_training_distribution(family: str) -> None:
    plain = dr_scene(np.random.default_rng(3), family, 0)
    base = sample_base(family, np.random.default_rng(3), SFT_PARAMS[family])
    assert _content(plain) == _content(base) and plain.provenance.program == "dr"
    edited = dr_scene(np.random.default_rng(3), family, 1)
    assert edited.provenance.parent == base.spec_id


def test_random_instructions_never_use_the_heldout_vocabulary(sft: dict[str, list[ScenarioSpec]]) -> None:
    heldout = heldout_only_words()
    for k in range(12):
        parent = sft[FAMILIES[k % 4]][k % 3]
        child = random_edit(np.random.default_rng(k), parent, operators=("paraphrase",))
        assert child.instruction != parent.instruction
        assert not set(tokens(child.instruction)) & heldout, child.instruction
        assert child.provenance.operators[-1] == "paraphrase:train"


def test_an_operator_that_never_fits_is_a_clear_error() -> None:
    params = dict(SFT_PARAMS["drawer"], n_others=(1, 1))
    spec = sample_base("drawer", np.random.default_rng(0), params)  # one object besides the drawer: nothing to swap
    with pytest.raises(MutationError, match=r"no operator of \['swap_positions'\] fits scene .* after 7 tries \(swap_positions: no entity"):
        random_edit(np.random.default_rng(0), spec, operators=("swap_positions",), max_tries=7)
    out = random_edit(np.random.default_rng(0), spec, operators=("swap_positions", "recolor"), max_tries=7)
    assert _op_names(out)[-1] == "recolor"  # the unfit operator is skipped for one that fits


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: mutate(np.random.default_rng(0), s, 0), r"n_edits = 0 must be an integer >= 1"),
        (lambda s: mutate(np.random.default_rng(0), s, True), r"n_edits = True must be an integer >= 1"),
        (lambda s: mutate(np.random.default_rng(0), s, 1, operators=("teleport",)), r"operator 'teleport' has no argument sampler"),
        (lambda s: mutate(np.random.default_rng(0), s, 1, operators=("one_of",)), r"operator 'one_of' has no argument sampler"),
        (lambda s: mutate(np.random.default_rng(0), s, 1, operators=()), r"operators = \(\): a mutation needs at least one"),
        (lambda s: random_edit(np.random.default_rng(0), s, max_tries=0), r"max_tries = 0 must be an integer >= 1"),
        (lambda s: mutate(np.random.default_rng(0), s.to_json(), 1), r"spec must be a ScenarioSpec, got str"),
        (lambda s: dr_scene(np.random.default_rng(0), "juggle", 1), r"family = 'juggle' is unknown\. Available: \['pick_place'"),
        (lambda s: dr_scene(np.random.default_rng(0), "push", -1), r"n_edits = -1 must be an integer >= 0"),
    ],
)
def test_bad_arguments_name_the_field(sft: dict[str, list[ScenarioSpec]], call: Callable[[ScenarioSpec], object], message: str) -> None:
    with pytest.raises(MutationError, match=message) as err:
        call(sft["push"][0])
    assert isinstance(err.value, CodaError) and "\n" not in str(err.value)
