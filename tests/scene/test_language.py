"""Descriptions, vocabulary tiers and seeded paraphrase."""

from __future__ import annotations

import re

import numpy as np
import pytest

from coda.scene.generators import sample_base
from coda.scene.language import (
    COLOR_SYNONYMS,
    SHAPE_SYNONYMS,
    SIZE_SYNONYMS,
    TEMPLATES,
    LanguageError,
    canonical_instruction,
    describe,
    heldout_only_words,
    paraphrase,
    tokens,
    vocabulary,
)
from coda.scene.spec import FAMILIES, ObjectSpec


def test_describe_names_size_colour_and_shape() -> None:
    cube = ObjectSpec(name="a", shape="box", size=(0.02, 0.02, 0.02), color="red", pos=(0, 0))
    block = ObjectSpec(name="b", shape="box", size=(0.04, 0.02, 0.02), color="blue", pos=(0, 0))
    assert describe(cube) == "small red cube"
    assert describe(block) == "large blue block"


def test_tiers_have_disjoint_distinguishing_words() -> None:
    held = heldout_only_words()
    assert held and not held & vocabulary("canonical") and not held & vocabulary("train")
    # every held-out synonym is held-out only, so a held-out word never leaks into sft or train wording
    for table in (COLOR_SYNONYMS, SHAPE_SYNONYMS, SIZE_SYNONYMS):
        for alts in table["heldout"].values():
            for a in alts:
                assert set(tokens(a)) <= held, a


def test_every_heldout_template_carries_a_heldout_word() -> None:
    held = heldout_only_words()
    for kind, templates in TEMPLATES["heldout"].items():
        for t in templates:
            words = set(tokens(re.sub(r"\{\w+\}", " ", t)))
            assert words & held, (kind, t)


@pytest.mark.parametrize("family", FAMILIES)
def test_paraphrase_changes_words_not_meaning(family: str) -> None:
    spec = sample_base(family, np.random.default_rng(1))
    canon = canonical_instruction(spec)
    assert spec.instruction == canon
    for seed in range(5):
        text = paraphrase(spec, np.random.default_rng(seed), "heldout")
        assert text != canon
        assert set(tokens(text)) & heldout_only_words()
        # the canonical instruction of the scene is untouched: the goal did not change
        assert canonical_instruction(spec.replace(instruction=text)) == canon
    assert paraphrase(spec, np.random.default_rng(9), "train") == paraphrase(spec, np.random.default_rng(9), "train")


def test_reorder_puts_the_destination_first() -> None:
    spec = sample_base("pick_place", np.random.default_rng(2))
    text = paraphrase(spec, np.random.default_rng(0), "heldout", reorder=True)
    assert text.startswith("inside ")
    text = paraphrase(spec, np.random.default_rng(0), "train", reorder=False)
    assert not text.startswith("into ")


def test_unknown_tier_lists_tiers() -> None:
    spec = sample_base("stack", np.random.default_rng(0))
    with pytest.raises(LanguageError, match=r"unknown vocabulary tier 'poetic'.*canonical"):
        paraphrase(spec, np.random.default_rng(0), "poetic")  # type: ignore[arg-type]
