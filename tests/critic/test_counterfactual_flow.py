"""The counterfactual check every backend's verifier runs (`VerifierFlow.check_counterfactual`), over a
backend that is nothing but a factor vocabulary: scenes are labels, a factor is a letter in the label, the
policy solves a scene without the letter "x"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from coda.critic.base import EpisodeRecord
from coda.critic.config import CriticConfig
from coda.critic.diagnosis import Diagnosis, SceneFactor
from coda.critic.verdict import CHECKS, VerifierFlow
from coda.errors import CodaError
from coda.sim.backends import FactorEdit


@dataclass(frozen=True)
class Scene:
    label: str
    task: str = "t"
    instruction: str = "do it"

    @property
    def spec_id(self) -> str:
        return f"{self.task}/{self.label}"


class Letters:
    """Factor `value` = a letter: applied, the base gets it; undone, the scene loses it ("!" never builds)."""

    name = "letters"

    def factor_edits(self, factors: Any, spec: Scene, tier: str = "train") -> list[FactorEdit]:
        edits = []
        for i, f in enumerate(factors):
            if f.value == "?":
                edits.append(FactorEdit(indices=(i,), apply=None, error="'?' is not an edit",
                                        undo=lambda rng, s=spec: s))
                continue
            edits.append(FactorEdit(
                indices=(i,), ops=({"op": "add", "args": {"letter": f.value}},),
                apply=lambda base, rng, v=f.value: Scene(base.label + v + str(rng.integers(2)), base.task),
                undo=lambda rng, s=spec, v=f.value: Scene(s.label.replace(v, "") + "-" + str(rng.integers(3)), s.task)
                if v in s.label else s))
        return edits

    def same_task(self, spec: Scene, base: Any) -> bool:
        return base.task == spec.task


class Flow(VerifierFlow):
    require = ("counterfactual",)

    def __init__(self, **cfg: Any) -> None:
        self.cfg, self.seed, self.sim = CriticConfig(**cfg), 3, Letters()


def factor(value: str) -> SceneFactor:
    return SceneFactor(kind="position", entity=None, value=value, detail="")


def diagnosis(*values: str) -> Diagnosis:
    return Diagnosis(critic="test", episode_id="e", failure_mode="missed_grasp", stage_reached="none", objects=(),
                     factors=tuple(factor(v) for v in values), explanation="e", stage_plan="1. grasp")


def episode(label: str) -> EpisodeRecord:
    return EpisodeRecord("e", Scene(label), False, 10)


class Policy:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, scene: Scene) -> bool:
        self.asked.append(scene.spec_id)
        if "!" in scene.label:
            raise CodaError(f"scene {scene.label} does not load")
        return "x" not in scene.label


def test_the_true_factor_is_verified_a_wrong_one_is_not_and_every_outcome_is_asked_once() -> None:
    flow, policy = Flow(counterfactual_k=2, counterfactual_margin=0.5), Policy()
    bases = [Scene("a"), Scene("bx"), Scene("c"), Scene("d", task="other")]
    v = flow.check(diagnosis("x", "y", "?"), episode("px"), policy_success=policy, base_scenes=bases)
    assert v.accepted and v.verified_factors == (factor("x"),)
    x, y, q = v.trials
    assert (x.sufficient, x.n, x.factor_failure_rate, x.base_failure_rate) == (True, 2, 1.0, 0.0)
    assert x.necessary and x.undone_success_rate == 1.0 and x.ops == ({"op": "add", "args": {"letter": "x"}},)
    assert y.sufficient is False and y.necessary is False and "already as in training" in y.undo_error
    assert q.sufficient is None and q.error == "'?' is not an edit" and not q.reproduced
    assert "d" not in " ".join(policy.asked)  # another task's scene is never a base
    assert len(policy.asked) == len(set(policy.asked)) == flow.episodes_run
    asked = len(policy.asked)
    again = flow.check(diagnosis("x"), episode("px"), policy_success=policy, base_scenes=bases)
    assert again.trials[0] == x and len(policy.asked) == asked  # the same draws, nothing run again
    fresh = Policy()  # another policy is asked again
    assert flow.check(diagnosis("x"), episode("px"), policy_success=fresh, base_scenes=bases).trials[0] == x
    assert fresh.asked


def test_without_a_solved_base_only_necessity_runs_and_scenes_that_do_not_build_are_skipped() -> None:
    flow = Flow(counterfactual_k=3, counterfactual_margin=0.5)
    v = flow.check(diagnosis("x"), episode("qx"), policy_success=Policy(), base_scenes=[Scene("zx")])
    (t,) = v.trials
    assert v.accepted and t.sufficient is None and "none of 1 base scene(s)" in t.error and t.necessary
    v = flow.check(diagnosis("x"), episode("x!"), policy_success=Policy(), base_scenes=[])
    (t,) = v.trials
    assert not v.accepted and "no undone scene builds" in t.undo_error and t.necessary is None
    none = flow.check(diagnosis(), episode("qx"), policy_success=Policy(), base_scenes=[])
    assert none.check("counterfactual").status == "failed" and "blames no scene factor" in none.reasons[0]
    assert flow.check(diagnosis("x"), episode("qx")).check("counterfactual").status == "not_run"


def test_the_draws_depend_on_the_verifier_seed_and_the_episode_only() -> None:
    a = Flow(counterfactual_k=3).check(diagnosis("x"), episode("px"), policy_success=Policy(),
                                       base_scenes=[Scene("a"), Scene("b")])
    b = Flow(counterfactual_k=3).check(diagnosis("x"), episode("px"), policy_success=Policy(),
                                       base_scenes=[Scene("a"), Scene("b")])
    assert a == b and CHECKS == ("consistency", "counterfactual", "potential")
    rng = np.random.default_rng(0)
    assert Letters().factor_edits([factor("x")], Scene("px"))[0].undo(rng).label.startswith("p-")
