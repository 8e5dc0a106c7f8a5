"""The records a verification produces: one `CheckResult` per check, one `FactorTrial` per implicated
factor, and the `Verdict` that gathers them; and `VerifierFlow`, how every backend's verifier checks a
diagnosis (`coda.critic.verify.Verifier` on the tabletop, `coda.critic.libero_verify.LiberoVerifier` on
LIBERO): the order of the checks, and the counterfactual check itself, over the simulator's factor
vocabulary (`SimBackend.factor_edits`); each verifier supplies the consistency and potential checks, which
read its simulator's state traces.

The counterfactual check (b) tests each implicated factor twice with the current policy. *Sufficiency*:
up to K base scenes of the same task (`SimBackend.same_task`) that the policy solves, found among the first
3K given, each with only that factor applied (`FactorEdit.apply`), must fail at a rate at least `margin`
above the base scenes' own failure rate (re-measured); it needs the edit to fit at least half of them.
*Necessity* (`counterfactual_undo`): the failed scene itself with only that factor put back as training
has it (`FactorEdit.undo`, up to K distinct variants), must be solved in at least a `margin` share of
them; a factor already as in training is not necessary. A factor is verified when every test that ran
passed (at least one ran); the check passes if one is. Without a solved base scene only necessity runs.
A scene that does not build is skipped and said so. Every policy outcome is asked once per policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from coda.critic.base import EpisodeRecord
from coda.critic.diagnosis import CriticResult, Diagnosis, SceneFactor
from coda.errors import CodaError, first_line
from coda.sim.backends import FactorEdit

VERDICT_SCHEMA_VERSION = 1
CheckName = Literal["consistency", "counterfactual", "potential"]
CHECKS: tuple[CheckName, ...] = ("consistency", "counterfactual", "potential")


class VerifyError(CodaError, ValueError):
    """The verifier was asked something it cannot do (unknown check name, ...)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckResult(_Frozen):
    """One check of a verdict."""

    name: CheckName
    status: Literal["passed", "failed", "not_run"]
    reason: str  # one line: why it passed / failed / did not run
    details: dict[str, float | int | str | bool | None] = Field(default_factory=dict)  # measured numbers


class FactorTrial(_Frozen):
    """The counterfactual test of one implicated factor."""

    factor: SceneFactor
    ops: tuple[dict[str, Any], ...] = ()  # operator calls that apply it ({"op": ..., "args": {...}})
    n: int = 0  # derived scenes evaluated
    base_failure_rate: float | None = None
    factor_failure_rate: float | None = None
    sufficient: bool | None = None  # applied to solved base scenes, it made them fail (None: could not run)
    undone_n: int = 0  # variants of the failed scene with the factor undone that were evaluated
    undone_success_rate: float | None = None
    necessary: bool | None = None  # undone in the failed scene, the policy then succeeds (None: could not run)
    reproduced: bool = False  # every test that ran passed, and at least one ran
    swapped_with: str | None = None  # the entity it trades places with: the pair is tested as one swap
    error: str = ""  # why the factor could not be applied, if it could not
    undo_error: str = ""  # why it could not be undone, if it could not


class Verdict(_Frozen):
    """Whether a diagnosis is accepted, with every check's result."""

    schema_version: int = VERDICT_SCHEMA_VERSION
    record: Literal["verdict"] = "verdict"
    episode_id: str | None
    critic: str
    failure_mode: str | None  # None when the critic's answer itself was rejected
    accepted: bool
    checks: tuple[CheckResult, ...]
    trials: tuple[FactorTrial, ...] = ()
    verified_factors: tuple[SceneFactor, ...] = ()  # factors whose counterfactual reproduced the failure
    reasons: tuple[str, ...] = ()  # why it was rejected (empty when accepted)

    def check(self, name: CheckName) -> CheckResult | None:
        """The result of one check, if it is part of the verdict."""
        return next((c for c in self.checks if c.name == name), None)


def verify_seed(seed: int, key: str | None) -> list[int]:
    """The seed of a verification's random draws: the verifier's seed and a digest of the episode (or scene)."""
    h = hashlib.sha256((key or "").encode()).digest()
    return [seed & 0xFFFFFFFF, int.from_bytes(h[:8], "little")]


def _trial_reason(t: FactorTrial) -> str:
    parts = []
    if t.sufficient is None:
        parts.append(t.error or "not applied")
    elif t.base_failure_rate is not None:
        parts.append(f"failure rate {t.factor_failure_rate:.2f} of {t.n} vs base {t.base_failure_rate:.2f}"
                     + (f" ({t.error})" if t.error else ""))
    if t.necessary is not None:
        parts.append(f"solved {t.undone_success_rate:.2f} of {t.undone_n} with it undone"
                     + (f" ({t.undo_error})" if t.undo_error else ""))
    elif t.undo_error:
        parts.append(t.undo_error)
    return "; ".join(parts)


class VerifierFlow:
    """How a diagnosis is verified, whatever the simulator: a rejected critic answer gives a rejected
    verdict; otherwise the checks in `require` run in the order (a) consistency with the episode's trace,
    (b) counterfactual trials of the implicated factors, (c) the stage plan's potential, and the verdict
    accepts the diagnosis when every one of them passed. None of them raises on a wrong diagnosis.

    A backend's verifier sets `require`, `cfg` (a `CriticConfig`: counterfactual_k, counterfactual_margin,
    counterfactual_undo, counterfactual_tier), `seed` and `sim` (its `SimBackend`), and implements checks
    (a) and (c); check (b) is this class's (see the module docstring).
    """

    require: tuple[str, ...] = CHECKS
    cfg: Any
    seed: int
    sim: Any
    episodes_run: int = 0  # policy episodes asked for (outcomes not yet known), over the verifier's life
    _outcomes_of: Any = None  # the policy_success whose outcomes `_outcomes` holds (spec_id -> outcome)
    _outcomes: dict[str, bool | str]

    def check(self, diagnosis: CriticResult, episode: EpisodeRecord, *,
              policy_success: Callable[[Any], bool] | None = None, base_scenes: Sequence[Any] = ()) -> Verdict:
        """Verify one diagnosis of `episode`. Never raises on a wrong diagnosis: the verdict says why.

        Args:
            diagnosis: the critic's result (a DiagnosisRejected gives a rejected verdict).
            episode: the episode it diagnoses (its state trace is needed for checks a and c).
            policy_success: runs the current policy on a scene and says whether it succeeded (check b).
            base_scenes: candidate base scenes for check b (scenes of another family or task are skipped).
        """
        if not isinstance(diagnosis, Diagnosis):
            return Verdict(episode_id=episode.episode_id, critic=diagnosis.critic, failure_mode=None, accepted=False,
                           checks=(), reasons=(f"the critic's answer was rejected: {diagnosis.reason}",))
        checks: list[CheckResult] = []
        trials: tuple[FactorTrial, ...] = ()
        if "consistency" in self.require:
            checks.append(self.consistency_check(diagnosis, episode))
        if "counterfactual" in self.require:
            result, trials = self.check_counterfactual(diagnosis, episode, policy_success, base_scenes)
            checks.append(result)
        if "potential" in self.require:
            checks.append(self.potential_check(diagnosis, episode))
        reasons = tuple(f"{c.name}: {c.reason}" for c in checks if c.status != "passed")
        return Verdict(episode_id=episode.episode_id, critic=diagnosis.critic, failure_mode=diagnosis.failure_mode,
                       accepted=not reasons, checks=tuple(checks), trials=trials,
                       verified_factors=tuple(t.factor for t in trials if t.reproduced), reasons=reasons)

    def consistency_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (a): the diagnosis agrees with what the episode's state trace shows."""
        raise NotImplementedError

    def check_counterfactual(self, d: Diagnosis, episode: EpisodeRecord, policy_success: Any,
                             base_scenes: Sequence[Any] = ()) -> tuple[CheckResult, tuple[FactorTrial, ...]]:
        """Check (b): does each implicated factor alone make solved scenes of the task fail, and does undoing
        it fix this one? (see the module docstring)."""
        if policy_success is None:
            return CheckResult(name="counterfactual", status="not_run", reason="no policy_success callable given"), ()
        if not d.factors:
            why = "the diagnosis blames no scene factor, so it cannot be verified counterfactually"
            return CheckResult(name="counterfactual", status="failed", reason=why), ()
        spec = episode.spec
        try:
            edits = self.sim.factor_edits(d.factors, spec, self.cfg.counterfactual_tier)
        except CodaError as e:
            return CheckResult(name="counterfactual", status="not_run", reason=first_line(e)), ()
        k, margin = self.cfg.counterfactual_k, self.cfg.counterfactual_margin
        self._consulted: set[str] = set()
        scan = [s for s in base_scenes if self.sim.same_task(spec, s)][: 3 * k]
        self._prefetch(policy_success, scan)
        solved: list[Any] = []
        for s in scan:  # a bounded search for scenes the policy solves
            if self._outcome(policy_success, s) is True:
                solved.append(s)
                if len(solved) == k:
                    break
        base_rate = (1.0 - float(np.mean([self._outcome(policy_success, s) is True for s in solved]))
                     if solved else None)  # re-measured: no selection bias
        unsolved = f"none of {len(scan)} base scene(s) of the failed scene's task is solved by the policy"
        rng = np.random.default_rng(verify_seed(self.seed, episode.episode_id))
        tested: dict[int, FactorTrial] = {}
        for e in edits:
            f, pair = d.factors[e.indices[0]], [d.factors[j] for j in e.indices[1:]]
            if e.apply is None or base_rate is None:
                trial = FactorTrial(factor=f, ops=e.ops, error=e.error or unsolved)
            else:
                trial = self._sufficiency(e, f, solved, base_rate, policy_success, rng)
            if self.cfg.counterfactual_undo:
                trial = self._necessity(e, trial, spec, policy_success, rng)
            ran = [x for x in (trial.sufficient, trial.necessary) if x is not None]
            trial = trial.model_copy(update={"reproduced": bool(ran) and all(ran),
                                             "swapped_with": pair[0].entity if pair else e.swapped_with})
            tested[e.indices[0]] = trial
            for j in e.indices[1:]:
                tested[j] = trial.model_copy(update={"factor": d.factors[j], "swapped_with": f.entity})
        trials = [tested[i] for i in sorted(tested)]
        ok = [t for t in trials if t.reproduced]
        details: dict[str, Any] = {"base_scenes": len(solved), "base_failure_rate": base_rate, "margin": margin,
                                   "k": k, "episodes": len(self._consulted)}
        for i, t in enumerate(trials):
            details[f"factor{i}"] = f"{t.factor.kind}:{t.factor.entity}:{t.factor.value}: {_trial_reason(t)}"
        if ok:
            why = f"{len(ok)}/{len(trials)} factor(s) reproduce the failure (margin {margin})"
            return CheckResult(name="counterfactual", status="passed", reason=why, details=details), tuple(trials)
        why = "; ".join(f"{t.factor.kind}={t.factor.value}: {_trial_reason(t)}" for t in trials)
        return CheckResult(name="counterfactual", status="failed", reason=f"no factor reproduces the failure ({why})",
                           details=details), tuple(trials)

    def _sufficiency(self, e: FactorEdit, f: SceneFactor, solved: Sequence[Any], base_rate: float,
                     policy_success: Any, rng: np.random.Generator) -> FactorTrial:
        """The factor applied alone to solved base scenes: do they now fail clearly more often?"""
        derived, errors = [], []
        for base in solved:
            try:
                derived.append(e.apply(base, rng))  # type: ignore[misc]
            except CodaError as err:  # the edit does not fit this base scene
                errors.append(first_line(err))
        self._prefetch(policy_success, derived)
        results = [self._outcome(policy_success, s) for s in derived]
        outcomes = [not r for r in results if isinstance(r, bool)]
        errors += [r for r in results if isinstance(r, str)]
        if len(outcomes) < max(1, (len(solved) + 1) // 2):
            return FactorTrial(factor=f, ops=e.ops, n=len(outcomes), base_failure_rate=base_rate,
                               error=f"applied to only {len(outcomes)}/{len(solved)} base scenes: {errors[:1]}")
        rate = float(np.mean(outcomes))
        return FactorTrial(factor=f, ops=e.ops, n=len(outcomes), base_failure_rate=base_rate,
                           factor_failure_rate=rate, sufficient=rate - base_rate >= self.cfg.counterfactual_margin,
                           error=f"{len(errors)} base scene(s) skipped: {errors[0]}" if errors else "")

    def _necessity(self, e: FactorEdit, trial: FactorTrial, spec: Any, policy_success: Any,
                   rng: np.random.Generator) -> FactorTrial:
        """The factor undone in the failed scene itself (up to K distinct variants): does the policy now succeed?"""
        variants: dict[str, Any] = {}
        for _ in range(e.undo_variants or self.cfg.counterfactual_k):
            try:
                undone = e.undo(rng)
            except CodaError as err:  # FactorError, or a scene the edit leaves invalid
                return trial.model_copy(update={"undo_error": first_line(err)})
            variants.setdefault(undone.spec_id, undone)
        changed = [v for sid, v in variants.items() if sid != spec.spec_id]
        if not changed:  # already as in training: undoing it changes nothing, so it did not cause the failure
            return trial.model_copy(update={"undone_n": 0, "undone_success_rate": 0.0, "necessary": False,
                                            "undo_error": "the factor is already as in training"})
        self._prefetch(policy_success, changed)
        results = [self._outcome(policy_success, v) for v in changed]
        outcomes = [r for r in results if isinstance(r, bool)]
        errors = [r for r in results if isinstance(r, str)]
        if not outcomes:
            return trial.model_copy(update={"undo_error": f"no undone scene builds: {errors[0]}"})
        rate = float(np.mean(outcomes))
        return trial.model_copy(update={
            "undone_n": len(outcomes), "undone_success_rate": rate,
            "necessary": rate >= self.cfg.counterfactual_margin,
            "undo_error": f"{len(errors)} undone scene(s) skipped: {errors[0]}" if errors else ""})

    def _outcome(self, policy_success: Any, scene: Any) -> bool | str:
        """Whether the policy solves `scene` (asked once per policy), or why the scene does not build."""
        if self._outcomes_of is not policy_success:
            self._outcomes_of, self._outcomes = policy_success, {}
        key = scene.spec_id
        self._consulted.add(key)
        if key not in self._outcomes:
            self.episodes_run += 1
            try:
                self._outcomes[key] = bool(policy_success(scene))
            except CodaError as e:  # a scene that does not load, placements that cannot be sampled
                self._outcomes[key] = f"scene {key} does not build: {first_line(e)}"
        return self._outcomes[key]

    def _prefetch(self, policy_success: Any, scenes: Sequence[Any]) -> None:
        """Let a `policy_success` that can (`prefetch`) roll `scenes` out together before they are asked
        about; where one of them does not build, they are asked one at a time."""
        prefetch = getattr(policy_success, "prefetch", None)
        known = self._outcomes if self._outcomes_of is policy_success else {}
        todo = [s for s in scenes if s.spec_id not in known]
        if prefetch is not None and todo:
            try:
                prefetch(todo)
            except CodaError:
                pass

    def potential_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (c): the diagnosis's stage plan compiles to a potential that rises along expert demos."""
        raise NotImplementedError


__all__ = ["CHECKS", "VERDICT_SCHEMA_VERSION", "CheckName", "CheckResult", "FactorTrial", "Verdict", "VerifierFlow",
           "VerifyError", "verify_seed"]
