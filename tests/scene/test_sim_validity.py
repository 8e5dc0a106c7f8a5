"""Generated splits against the simulator: a small sample of every split is valid and the expert solves it."""

from __future__ import annotations

import pytest

from coda.scene.spec import FAMILIES
from coda.scene.splits import SPLITS, make_split

validity = pytest.importorskip("coda.sim.tabletop.validity")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_split_sample_is_valid_and_solved_by_the_expert(family: str) -> None:
    for split in SPLITS:
        for spec in make_split(family, split, 1, seed=21):
            r = validity.check_validity(spec, expert=True)
            assert r.valid, (family, split, spec.provenance.operators, r.reason, r.details)
