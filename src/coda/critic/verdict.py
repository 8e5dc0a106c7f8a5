"""The records a verification produces: one `CheckResult` per check, one `FactorTrial` per implicated
factor, and the `Verdict` that gathers them; and `VerifierFlow`, the order of the checks every backend's
verifier follows (`coda.critic.verify.Verifier` on the tabletop, `coda.critic.libero_verify.LiberoVerifier`
on LIBERO: each supplies the three checks for its simulator)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coda.critic.base import EpisodeRecord
from coda.critic.diagnosis import CriticResult, Diagnosis, SceneFactor
from coda.errors import CodaError

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


class VerifierFlow:
    """How a diagnosis is verified, whatever the simulator: a rejected critic answer gives a rejected
    verdict; otherwise the checks in `require` run in the order (a) consistency with the episode's trace,
    (b) counterfactual trials of the implicated factors, (c) the stage plan's potential, and the verdict
    accepts the diagnosis when every one of them passed. A backend's verifier sets `require` and implements
    the three checks; none of them raises on a wrong diagnosis.
    """

    require: tuple[str, ...] = CHECKS

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
        """Check (b): undoing an implicated factor fixes the scene, applying it alone breaks solved ones."""
        raise NotImplementedError

    def potential_check(self, d: Diagnosis, episode: EpisodeRecord) -> CheckResult:
        """Check (c): the diagnosis's stage plan compiles to a potential that rises along expert demos."""
        raise NotImplementedError


__all__ = ["CHECKS", "VERDICT_SCHEMA_VERSION", "CheckName", "CheckResult", "FactorTrial", "Verdict", "VerifierFlow",
           "VerifyError"]
