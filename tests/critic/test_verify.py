"""Verification of diagnoses: trace consistency, single-factor counterfactuals and the compiled potential."""

from __future__ import annotations

import numpy as np
import pytest

from coda.critic.config import CriticConfig
from coda.critic.diagnosis import Diagnosis, DiagnosisRejected, SceneFactor
from coda.critic.noisy import NoisyCritic
from coda.critic.privileged import PrivilegedCritic
from coda.critic.verify import Verifier, VerifyError
from coda.scene.factors import FactorError
from coda.sim.tabletop.factors import factor_ops, swapped_pairs, undo_factor
from coda.scene.operators import derive
from coda.sim.tabletop.experts import rollout_expert

CAUSES = ["wrong_object", "wrong_target", "missed_grasp", "imprecise_placement", "premature_release", "no_progress",
          "detour", "knocked_over", "drawer_not_operated", "drawer_missed_grasp", "push_wrong_object"]


@pytest.fixture(scope="module")
def verifier(sim):
    v = Verifier(CriticConfig(counterfactual_k=4), env_factory=lambda: sim.env)
    yield v


def swap(d: Diagnosis, **changes) -> Diagnosis:
    return d.model_copy(update=changes)


def test_privileged_diagnoses_are_consistent(episodes, verifier) -> None:
    for cause in CAUSES:
        ep = episodes[cause]
        d = PrivilegedCritic().diagnose(ep)
        c = Verifier(require=("consistency",)).check(d, ep)
        assert c.accepted, (cause, c.reasons)


@pytest.mark.parametrize(
    ("cause", "changes", "needle"),
    [
        ("wrong_object", {"failure_mode": "missed_grasp"}, "never shut next to the target"),
        ("wrong_object", {"objects": ("obj0",)}, "are not implicated"),
        ("missed_grasp", {"failure_mode": "slip_during_transport"}, "never left closed jaws"),
        ("missed_grasp", {"stage_reached": "lift"}, "'lift' was never reached"),
        ("missed_grasp", {"stage_reached": "push"}, "not a stage of this task"),
        ("missed_grasp", {"objects": ("obj1",)}, "does not implicate"),
        ("premature_release", {"failure_mode": "imprecise_placement"}, "never released or pushed near"),
        ("imprecise_placement", {"failure_mode": "premature_release"}, "never released more than"),
        ("no_progress", {"failure_mode": "detour"}, "the gripper travelled 0.00 m"),
        ("detour", {"failure_mode": "knocked_over"}, "no object tipped over"),
        ("wrong_target", {"failure_mode": "no_progress", "stage_reached": "lift"}, "was carried"),
        ("drawer_not_operated", {"failure_mode": "wrong_object"}, "does not apply to a drawer goal"),
        ("premature_release", {"stage_reached": "none"}, "falls 3 stages short"),
    ],
)
def test_inconsistent_diagnoses_are_rejected_with_the_reason(episodes, cause, changes, needle) -> None:
    ep = episodes[cause]
    d = swap(PrivilegedCritic().diagnose(ep), **changes)
    v = Verifier(require=("consistency",)).check(d, ep)
    assert not v.accepted and v.check("consistency").status == "failed"
    assert needle in v.reasons[0], v.reasons


def test_consistency_catches_most_corrupted_modes_and_objects(episodes) -> None:
    """Measured: the share of noisy-critic corruptions (mode or object) that check (a) alone rejects."""
    caught = total = 0
    for seed in range(4):
        noisy = NoisyCritic(PrivilegedCritic(), rate=1.0, seed=seed, kinds=("mode", "object"))
        for cause in CAUSES:
            ep = episodes[cause]
            d = noisy.diagnose(ep)
            total += 1
            caught += not Verifier(require=("consistency",)).check(d, ep).accepted
    assert total == 4 * len(CAUSES)
    assert caught / total >= 0.75, caught / total


def test_rejected_answers_and_missing_inputs(episodes) -> None:
    ep = episodes["no_progress"]
    r = DiagnosisRejected(critic="vlm", episode_id=ep.episode_id, reason="malformed JSON: x", raw_text="{")
    v = Verifier().check(r, ep)
    assert not v.accepted and v.reasons == ("the critic's answer was rejected: malformed JSON: x",)
    d = PrivilegedCritic().diagnose(ep)
    v = Verifier(require=("consistency", "counterfactual")).check(d, ep)
    assert not v.accepted and v.check("counterfactual").status == "not_run"
    assert "no policy_success callable" in v.check("counterfactual").reason
    with pytest.raises(VerifyError, match=r"unknown check\(s\) \['vibes'\]"):
        Verifier(require=("vibes",))


# ---- (b) counterfactual with a policy that memorised one layout -----------------------------------------


@pytest.fixture(scope="module")
def replay(sim, episodes):
    """A policy that replays the expert's actions for one reference layout open loop (it memorised the layout)."""
    ref = episodes.pick
    actions = rollout_expert(sim.env, ref, max_steps=120).actions

    def success(spec) -> bool:
        sim.env.reset_to(spec)
        for a in actions:
            _, _, term, trunc, info = sim.env.step(a)
            if term or trunc:
                break
        return bool(info["success"])

    rng = np.random.default_rng(0)
    bases = [derive(rng, ref, [("recolor", {"object": "other"})]) for _ in range(6)]  # same layout, other colours
    return success, bases


def test_counterfactual_verifies_the_factor_that_matters(episodes, verifier, replay) -> None:
    success, bases = replay
    ep = episodes["missed_grasp"]
    target = ep.spec.goal[0].args[0]
    d = swap(PrivilegedCritic().diagnose(ep), factors=(
        SceneFactor(kind="object_attribute", entity=target, value="color=blue", detail="colour"),
        SceneFactor(kind="position", entity=target, value="far_right", detail="moved"),
        SceneFactor(kind="position", entity=target, value="upstairs", detail="not a region"),
    ))
    # sufficiency alone (the replaying policy memorised an arbitrary layout, not the training regions undo uses)
    v = Verifier(CriticConfig(counterfactual_k=4, counterfactual_undo=False), require=("counterfactual",)).check(
        d, ep, policy_success=success, base_scenes=bases)
    assert v.accepted and v.check("counterfactual").status == "passed"
    colour, position, bad = v.trials
    assert colour.factor_failure_rate == 0.0 and not colour.reproduced and colour.n == 4
    assert position.factor_failure_rate == 1.0 and position.reproduced and position.base_failure_rate == 0.0
    assert "not a named region" in bad.error and not bad.reproduced
    assert v.verified_factors == (position.factor,)
    assert position.ops == ({"op": "place_in_region", "args": {"object": "target", "region": "far_right"}},)


def test_counterfactual_rejects_factors_that_do_not_matter(episodes, replay) -> None:
    success, bases = replay
    ep = episodes["missed_grasp"]
    d = swap(PrivilegedCritic().diagnose(ep), factors=(
        SceneFactor(kind="object_attribute", entity=ep.spec.goal[0].args[0], value="color=green", detail=""),
        SceneFactor(kind="instruction", entity=None, value="small red cube", detail=""),
    ))
    v = Verifier(CriticConfig(counterfactual_k=3, counterfactual_undo=False), require=("counterfactual",)).check(
        d, ep, policy_success=success, base_scenes=bases)
    assert not v.accepted and "no factor reproduces the failure" in v.reasons[0]
    assert [t.factor_failure_rate for t in v.trials] == [0.0, 0.0]


def test_end_to_end_accepts_a_true_diagnosis_and_rejects_a_corrupted_factor(sim, episodes, verifier, replay) -> None:
    """The memorising policy fails once its target moves; the privileged diagnosis of that failure is verified.
    (It memorised an arbitrary layout rather than the training regions, so undoing a factor is left out.)"""
    success, bases = replay
    verifier = Verifier(verifier.cfg.model_copy(update={"counterfactual_undo": False}), verifier.shaping,
                        env_factory=verifier.env_factory)
    moved = derive(np.random.default_rng(1), episodes.pick, [("place_in_region", {"object": "target", "region": "far_right"})])
    ep = sim.episode(moved, lambda s, t, a=rollout_expert(sim.env, episodes.pick, 120).actions: a[min(t, len(a) - 1)],
                     120, episode_id="moved")
    assert not ep.success
    d = PrivilegedCritic().diagnose(ep)
    assert [f.kind for f in d.factors] == ["position"] and d.factors[0].entity == moved.goal[0].args[0]
    v = verifier.check(d, ep, policy_success=success, base_scenes=bases)
    assert v.accepted, v.reasons
    assert [c.status for c in v.checks] == ["passed", "passed", "passed"]
    assert v.verified_factors == d.factors

    noisy = NoisyCritic(PrivilegedCritic(), rate=1.0, seed=0, kinds=("factor",))
    bad = noisy.diagnose(ep)
    assert noisy.corrupted("moved") is not None and bad.factors[0].kind != "position"
    v2 = verifier.check(bad, ep, policy_success=success, base_scenes=bases)
    assert not v2.accepted and v2.check("counterfactual").status == "failed"


def _sft_layout_policy(spec) -> bool:
    """A policy that memorised the training layout: it succeeds exactly when every entity of a pick_place scene
    sits in its training region and there are no more objects than in training."""
    from coda.scene.regions import REGIONS
    from coda.scene.splits import SFT_PARAMS

    p = SFT_PARAMS["pick_place"]
    target, dest = spec.goal[0].args
    region = {target: p["target_region"], dest: p["goal_region"]}
    for e in (*spec.objects, *spec.containers):
        if not REGIONS[region.get(e.name, p["others_region"] if e in spec.objects else p["alt_region"])].contains(*e.pos, tol=0.005):
            return False
    return len(spec.objects) == 1 + p["n_others"][1]


def test_necessity_tells_the_moved_object_from_a_guessed_one(episodes) -> None:
    """A policy that fails wherever ANY object leaves its training region makes every position factor
    *sufficient*; undoing the factor in the failed scene tells the object that moved from a guessed one."""
    import dataclasses

    from coda.scene.generators import sample_base
    from coda.scene.splits import SFT_PARAMS

    rng = np.random.default_rng(3)
    bases = [sample_base("pick_place", rng, SFT_PARAMS["pick_place"]) for _ in range(4)]
    assert all(_sft_layout_policy(b) for b in bases)
    moved = derive(rng, bases[0], [("place_in_region", {"object": "target", "region": "far_right"})])
    assert not _sft_layout_policy(moved)
    target, dest = moved.goal[0].args
    other = next(o.name for o in moved.objects if o.name != target)
    ep = dataclasses.replace(episodes["missed_grasp"], spec=moved, episode_id="moved_target")
    d = swap(PrivilegedCritic().diagnose(episodes["missed_grasp"]), objects=(target,), factors=(
        SceneFactor(kind="position", entity=target, value="far_right", detail="moved"),
        SceneFactor(kind="position", entity=other, value="far_left", detail="a guess"),
        SceneFactor(kind="physics", entity=None, value="friction_scale=0.4", detail="a guess"),
    ))
    cfg = CriticConfig(counterfactual_k=4)
    v = Verifier(cfg, require=("counterfactual",)).check(d, ep, policy_success=_sft_layout_policy, base_scenes=bases)
    right, guessed, physics = v.trials
    assert right.sufficient and right.necessary and right.undone_success_rate == 1.0 and right.reproduced
    assert guessed.sufficient and guessed.necessary is False and guessed.undone_success_rate == 0.0
    assert not guessed.reproduced  # sufficiency alone would have verified it
    assert physics.sufficient is False and not physics.reproduced
    assert "already as in training" in physics.undo_error
    assert v.accepted and v.verified_factors == (right.factor,)
    alone = Verifier(cfg.model_copy(update={"counterfactual_undo": False}), require=("counterfactual",)).check(
        d, ep, policy_success=_sft_layout_policy, base_scenes=bases)
    assert [t.factor for t in alone.trials if t.reproduced] == [right.factor, guessed.factor]


def test_a_swapped_layout_is_applied_and_undone_as_one_swap(episodes) -> None:
    """Goal and alternative container trade places: moving either alone collides with the other, so the
    pair is tested as a swap (of roles in base scenes, back in the failed scene)."""
    import dataclasses

    from coda.scene.generators import sample_base
    from coda.scene.splits import SFT_PARAMS

    rng = np.random.default_rng(5)
    bases = [sample_base("pick_place", rng, SFT_PARAMS["pick_place"]) for _ in range(4)]
    swapped = derive(rng, bases[0], [("swap_positions", {"a": "goal", "b": "alt"})])
    target, dest = swapped.goal[0].args
    alt = next(c.name for c in swapped.containers if c.name != dest)
    assert not _sft_layout_policy(swapped)
    ep = dataclasses.replace(episodes["missed_grasp"], spec=swapped, episode_id="swapped")
    pair = (SceneFactor(kind="position", entity=dest, value="near", detail="swapped"),
            SceneFactor(kind="position", entity=alt, value="far", detail="swapped"))
    assert swapped_pairs(pair, swapped) == {0: 1, 1: 0} and swapped_pairs(pair, bases[0]) == {}
    d = swap(PrivilegedCritic().diagnose(episodes["missed_grasp"]), objects=(target,), factors=pair)
    v = Verifier(CriticConfig(counterfactual_k=4), require=("counterfactual",)).check(
        d, ep, policy_success=_sft_layout_policy, base_scenes=bases)
    a, b = v.trials
    assert a.ops == ({"op": "swap_positions", "args": {"a": "goal", "b": "alt"}},) and a.n == 4
    assert a.sufficient and a.necessary and a.undone_n == 1 and a.undone_success_rate == 1.0
    assert (a.swapped_with, b.swapped_with) == (alt, dest) and b.factor == pair[1] and b.reproduced
    assert v.accepted and v.verified_factors == pair


def test_undo_factor_puts_one_factor_back_as_in_training() -> None:
    from coda.scene.generators import sample_base
    from coda.scene.language import canonical_instruction
    from coda.scene.regions import REGIONS
    from coda.scene.splits import SFT_PARAMS

    rng = np.random.default_rng(4)
    base = sample_base("pick_place", rng, SFT_PARAMS["pick_place"])
    target = base.goal[0].args[0]
    ood = derive(rng, base, [("place_in_region", {"object": "target", "region": "far_right"}),
                             ("paraphrase", {"tier": "heldout"}), ("scale_physics", {"friction": [0.3, 0.4]}),
                             ("add_distractors", {"n": 1, "kind": "lookalike", "region": "table", "colors": ["purple"]})])

    def factor(kind: str, entity: str | None = None, value: str = "") -> SceneFactor:
        return SceneFactor(kind=kind, entity=entity, value=value, detail="")

    back = undo_factor(rng, factor("position", target, "far_right"), ood)
    assert REGIONS["spot_left"].contains(*back.entity(target).pos) and back.instruction == ood.instruction
    assert undo_factor(rng, factor("instruction"), ood).instruction == canonical_instruction(ood)
    assert undo_factor(rng, factor("physics", value="friction_scale=0.35"), ood).physics.friction_scale == 1.0
    added = {o.name for o in ood.objects} - {o.name for o in base.objects}
    assert {o.name for o in undo_factor(rng, factor("distractor"), ood).objects} == {o.name for o in base.objects}
    kept = tuple(o for o in ood.objects if o.name not in added)
    assert added and undo_factor(rng, factor("distractor", next(iter(added))), ood).objects == kept
    assert undo_factor(rng, factor("distractor"), base) == base  # no more objects than in training
    assert undo_factor(rng, factor("position", target, "left"), base) == base  # already in its training region
    assert undo_factor(rng, factor("object_attribute", target, "color=red"), base) == base
    push = sample_base("push", rng, SFT_PARAMS["push"])
    (region_name,) = [r.name for r in push.regions if r.name == push.goal[0].args[1]]
    moved = derive(rng, push, [("place_in_region", {"object": "goal", "region": "far_left"})])
    back = undo_factor(rng, factor("position", region_name, "far_left"), moved)  # a goal region has a centre, not a pos
    assert REGIONS[SFT_PARAMS["push"]["goal_region"]].contains(*back.entity(region_name).center)
    assert undo_factor(rng, factor("position", region_name, "far_left"), push) == push
    with pytest.raises(FactorError, match="task factor has no undo"):
        undo_factor(rng, factor("task"), ood)
    with pytest.raises(FactorError, match="cannot undo position"):
        undo_factor(rng, factor("position", "nonexistent", "far_left"), ood)


# ---- (c) the compiled potential along expert demos --------------------------------------------------------


def test_potential_check(episodes, verifier) -> None:
    ep = episodes["missed_grasp"]
    spec = ep.spec
    d = PrivilegedCritic().diagnose(ep)
    good = verifier.check_potential(d, spec)
    assert good.status == "passed" and good.details["demos"] == 2 and good.details["min_rank_corr"] >= 0.95

    target, dest = spec.goal[0].args
    other = next(o.name for o in spec.objects if o.name != target)
    wrong = verifier.check_potential(swap(d, stage_plan=f"1. reach {other} 2. grasp it 3. lift it 4. move above "
                                                        f"{dest} 5. release it inside {dest}"), spec)
    assert wrong.status == "failed"
    short = verifier.check_potential(swap(d, stage_plan=f"reach {target}, grasp it, lift it"), spec)
    assert short.status == "failed" and short.details["final_phi"] < 1.0  # lifting is undone by the release
    garbled = verifier.check_potential(swap(d, stage_plan="1. teleport the cube home"), spec)
    assert garbled.status == "failed" and "does not compile" in garbled.reason and "'teleport'" in garbled.reason


def test_factor_ops_cover_every_kind(episodes) -> None:
    spec = episodes.pick
    t, g = spec.goal[0].args
    alt = next(c.name for c in spec.containers if c.name != g)
    cases = [
        (SceneFactor(kind="position", entity=alt, value="far_left", detail=""), "place_in_region", {"object": "alt", "region": "far_left"}),
        (SceneFactor(kind="region", entity=g, value="center", detail=""), "place_in_region", {"object": "goal", "region": "center"}),
        (SceneFactor(kind="position", entity=None, value="robot_start", detail=""), "move_robot_start", {}),
        (SceneFactor(kind="instruction", entity=None, value="crimson", detail=""), "paraphrase", {"tier": "train", "p_synonym": 1.0}),
        (SceneFactor(kind="task", entity=t, value="red cube -> blue bowl", detail=""), "change_task", {"change": "any"}),
        (SceneFactor(kind="object_attribute", entity=t, value="size=small", detail=""), "resize", {"object": "target", "scale": (0.7, 0.9)}),
        (SceneFactor(kind="object_attribute", entity=t, value="shape=cylinder", detail=""), "reshape", {"object": "target", "shapes": ["cylinder"]}),
        (SceneFactor(kind="physics", entity=None, value="mass_scale=3", detail=""), "scale_physics", {"mass": (2.7, 3.3000000000000003)}),
        (SceneFactor(kind="distractor", entity=None, value="x", detail=""), "add_distractors", {"n": 1, "kind": "lookalike", "region": "near_target"}),
    ]
    rng = np.random.default_rng(0)
    for f, op, args in cases:
        (call,) = factor_ops(f, spec)
        assert call == {"op": op, "args": args}
        derive(rng, spec, [(call["op"], call["args"])])  # the operators accept them
    with pytest.raises(FactorError, match="attribute must be color, size or shape"):
        factor_ops(SceneFactor(kind="object_attribute", entity=t, value="smell=sweet", detail=""), spec)


def test_a_task_factor_asks_for_another_goal(episodes) -> None:
    spec = episodes.pick
    f = SceneFactor(kind="task", entity=spec.goal[0].args[0], value="red cube -> blue bowl", detail="")
    for seed in range(4):
        out = derive(np.random.default_rng(seed), spec, [(o["op"], o["args"]) for o in factor_ops(f, spec)])
        assert out.goal[0] != spec.goal[0] and out.instruction != spec.instruction
        assert [(o.name, o.pos) for o in out.objects] == [(o.name, o.pos) for o in spec.objects]  # same layout
        assert "task" in out.provenance.factors


def test_a_task_failure_is_verified_by_a_task_change_not_by_rewording(sim, episodes, replay) -> None:
    """The memorising policy ignores the instruction: asking for another object reproduces its failure."""
    success, bases = replay
    changed = derive(np.random.default_rng(0), episodes.pick, [("change_task", {"change": "target"})])
    ep = sim.episode(changed, lambda s, t, a=rollout_expert(sim.env, episodes.pick, 120).actions: a[min(t, len(a) - 1)],
                     120, episode_id="task")
    assert not ep.success
    d = PrivilegedCritic().diagnose(ep)
    assert [f.kind for f in d.factors] == ["task"]
    v = Verifier(CriticConfig(counterfactual_k=3), require=("counterfactual",)).check(
        d, ep, policy_success=success, base_scenes=bases)
    assert v.accepted and v.verified_factors == d.factors, v.reasons
    assert v.trials[0].ops == ({"op": "change_task", "args": {"change": "any"}},) and v.trials[0].factor_failure_rate == 1.0
    reworded = swap(d, factors=(SceneFactor(kind="instruction", entity=None, value=changed.instruction, detail=""),))
    v2 = Verifier(CriticConfig(counterfactual_k=3), require=("counterfactual",)).check(
        reworded, ep, policy_success=success, base_scenes=bases)
    assert not v2.accepted and v2.trials[0].factor_failure_rate == 0.0
