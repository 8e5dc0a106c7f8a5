"""The records a verification produces: one `CheckResult` per check, one `FactorTrial` per implicated
factor, and the `Verdict` that gathers them (`coda.critic.verify.Verifier` writes them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coda.critic.diagnosis import SceneFactor
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


__all__ = ["CHECKS", "VERDICT_SCHEMA_VERSION", "CheckName", "CheckResult", "FactorTrial", "Verdict", "VerifyError"]
