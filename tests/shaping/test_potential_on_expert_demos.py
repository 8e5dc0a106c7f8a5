"""Φ from the canonical plan rises along scripted-expert demonstrations of every family and peaks at success."""

from __future__ import annotations

import numpy as np
import pytest

from coda.scene.generators import sample_base
from coda.shaping.text2potential import canonical_plan, compile_plan, spearman_with_time
from coda.sim.tabletop.env import TabletopEnv
from coda.sim.tabletop.experts import rollout_expert
from coda.sim.tabletop.predicates import goal_satisfied

DROP_TOL = 0.02  # largest single-step decrease of Φ allowed (contact noise while grasping/pushing)
N_DEMOS = 20

# Drawer demos cover opening fully, halfway, closing, and half-closing from fully open.
DRAWER_PARAMS = [dict(drawer_goal="open"), dict(drawer_goal="half"), dict(drawer_goal="close", drawer_start=0.9),
                 dict(drawer_goal="half", drawer_start=1.0)]


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv()
    yield e
    e.close()


@pytest.mark.parametrize("family", ["pick_place", "stack", "push", "drawer"])
def test_phi_rises_along_expert_demos(env, family: str) -> None:
    worst_corr, worst_drop, solved = 1.0, 0.0, 0
    for seed in range(N_DEMOS):
        params = DRAWER_PARAMS[seed % 4] if family == "drawer" else None
        spec = sample_base(family, np.random.default_rng(1000 + seed), params)
        ep = rollout_expert(env, spec, max_steps=200)  # the env's own time limit
        if not ep.success:
            continue
        solved += 1
        pot = compile_plan(canonical_plan(spec), spec)
        phi = pot.phis(ep.states)
        worst_corr = min(worst_corr, spearman_with_time(phi))
        worst_drop = max(worst_drop, float(-np.diff(phi).min()))
        assert phi[-1] == 1.0 == phi.max()  # maximal at success
        assert phi[0] < 0.5
        assert [p == 1.0 for p in phi] == [goal_satisfied(s, spec) for s in ep.states]
    assert solved >= N_DEMOS - 1
    assert worst_corr >= 0.95, worst_corr
    assert worst_drop <= DROP_TOL, worst_drop
