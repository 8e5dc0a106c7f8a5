"""The privileged critic on real rollouts in the tabletop simulator whose cause of failure is known."""

from __future__ import annotations

import numpy as np
import pytest

from coda.critic.base import CriticUnavailable, EpisodeRecord, FallbackCritic, make_critic
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import Diagnosis, DiagnosisRejected
from coda.critic.privileged import PrivilegedCritic, provenance_factor
from coda.critic.trace import summarize
from coda.critic.vlm import VLMCritic
from coda.scene.operators import derive
from coda.shaping.resolve import entity_words
from coda.shaping.text2potential import canonical_plan, parse_plan

CASES = [
    # cause, expected mode, stage reached, objects that must be implicated (roles), factor kinds allowed
    ("wrong_object", "wrong_object", None, ["other", "target"], {"distractor"}),
    ("wrong_target", "wrong_target", "lift", ["target", "alt"], {"distractor"}),
    ("missed_grasp", "missed_grasp", "reach", ["target"], {"position", "object_attribute"}),
    ("imprecise_placement", "imprecise_placement", "lift", ["target", "dest"], {"position"}),
    ("premature_release", "premature_release", "lift", ["target", "dest"], {"position"}),
    ("slip_during_transport", "slip_during_transport", None, ["target"], {"physics", "object_attribute"}),
    ("no_progress", "no_progress", "none", ["target"], {"position"}),
    ("detour", "detour", "none", ["target"], {"position"}),
    ("knocked_over", "knocked_over", None, [], {"distractor", "position"}),
    ("drawer_not_operated", "drawer_not_operated", "none", ["drawer"], {"position"}),
    ("drawer_missed_grasp", "missed_grasp", None, ["drawer"], {"position"}),
    ("push_wrong_object", "wrong_object", None, ["target"], {"distractor"}),
]


def roles(ep: EpisodeRecord) -> dict[str, str]:
    spec = ep.spec
    g = spec.goal[0]
    out = {"target": g.args[0], "drawer": g.args[0]}
    if len(g.args) > 1:
        out["dest"] = g.args[1]
        out["alt"] = next((c.name for c in spec.containers if c.name != g.args[1]), "")
        out["other"] = next(o.name for o in spec.objects if o.name != g.args[0])
    return out


@pytest.mark.parametrize(("cause", "mode", "stage", "implicated", "factor_kinds"), CASES, ids=[c[0] for c in CASES])
def test_diagnoses_the_known_cause(episodes, cause, mode, stage, implicated, factor_kinds) -> None:
    ep = episodes[cause]
    assert not ep.success
    d = PrivilegedCritic().diagnose(ep)
    assert isinstance(d, Diagnosis), d
    assert d.failure_mode == mode, (d.explanation, summarize(PrivilegedCritic().facts(ep)))
    if stage is not None:
        assert d.stage_reached == stage
    r = roles(ep)
    for role in implicated:
        if role == "other" and cause == "wrong_object":
            assert d.objects[0] != r["target"]  # the grasped object comes first
        else:
            assert r[role] in d.objects, (role, d.objects)
    assert d.factors and {f.kind for f in d.factors} <= factor_kinds
    assert d.stage_plan == canonical_plan(ep.spec) and parse_plan(d.stage_plan, ep.spec)
    assert d.critic == "privileged" and d.episode_id == cause and d.explanation


def test_wrong_object_names_the_object_it_grasped(episodes) -> None:
    ep = episodes["wrong_object"]
    d = PrivilegedCritic().diagnose(ep)
    facts = PrivilegedCritic().facts(ep)
    assert d.objects[0] in facts.grasped and d.factors[0].entity == d.objects[0]


def test_provenance_factors_come_first(episodes) -> None:
    ep = episodes["missed_grasp"]
    spec = ep.spec.replace(provenance=ep.spec.provenance.model_copy(update={"factors": ("object:obj0:color", "physics:mass")}))
    d = PrivilegedCritic().diagnose(EpisodeRecord("p", spec, False, ep.steps, states=ep.states))
    assert [(f.kind, f.value) for f in d.factors] == [("object_attribute", f"color={spec.object('obj0').color}"), ("physics", "mass_scale=1.00")]


def test_solved_episode_is_not_diagnosed(episodes) -> None:
    ep = episodes["solved"]
    assert ep.success
    r = PrivilegedCritic().diagnose(ep)
    assert isinstance(r, DiagnosisRejected) and "nothing to diagnose" in r.reason


def test_needs_the_state_trace_and_can_back_up_the_vlm_critic(episodes) -> None:
    ep = episodes["no_progress"]
    bare = EpisodeRecord("bare", ep.spec, False, ep.steps)
    with pytest.raises(CriticUnavailable, match="needs the state trace; episode 'bare' has none"):
        make_critic(CriticConfig(name="privileged")).diagnose(bare)
    dead = VLMCritic(CriticConfig(name="vlm", base_url="http://127.0.0.1:9/v1", api_key_env=None, retries=0, timeout_s=1))
    d = FallbackCritic([dead, PrivilegedCritic()]).diagnose(ep)
    assert isinstance(d, Diagnosis) and d.critic == "privileged"
    assert any("critic 'vlm' unavailable" in n for n in d.notes)


def test_summary_in_words(episodes) -> None:
    text = summarize(PrivilegedCritic().facts(episodes["premature_release"]))
    assert "target released at step" in text and "lifted: obj" in text and "goal not reached" in text


def test_a_changed_task_is_a_task_factor(sim, episodes) -> None:
    """The policy does the old task in a scene whose instruction now asks for another object."""
    base = episodes.pick
    changed = derive(np.random.default_rng(0), base, [("change_task", {"change": "target"})])
    new_target = changed.goal[0].args[0]
    assert new_target != base.goal[0].args[0] and "task" in changed.provenance.factors
    ep = sim.episode(changed, sim.expert(base), 120, episode_id="task")
    d = PrivilegedCritic().diagnose(ep)
    assert isinstance(d, Diagnosis) and d.failure_mode == "wrong_object", d.explanation
    task = [f for f in d.factors if f.kind == "task"]
    assert task and task[0].entity == new_target and task[0].detail == "the task asked in this layout"
    assert task[0].value.startswith(entity_words(changed.entity(new_target)))
    assert not [f for f in d.factors if f.kind == "instruction"]
    # a reworded instruction stays an instruction factor
    worded = provenance_factor(changed, "instruction")
    assert worded is not None and (worded.kind, worded.entity, worded.value) == ("instruction", None, changed.instruction)
