"""The diagnosis schema every critic writes, and the strict parser for model output.

A `Diagnosis` says why an episode failed: a failure mode from a fixed taxonomy, the furthest stage the
policy completed, the scene entities and factors implicated, an explanation in words, and a stage plan in
words that Text2potential compiles into a potential. Model output is data: it is parsed as JSON and
validated against this schema — never evaluated. Anything that does not validate becomes a
`DiagnosisRejected` record holding the raw text and the reason, so nothing is silently dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from coda.errors import CodaError, SchemaVersionError
from coda.redact import one_line, redact_bounded
from coda.scene.factors import FACTOR_KINDS, SceneFactor
from coda.scene.spec import ScenarioSpec, entity_kinds, format_validation_error
from coda.shaping.program import STAGE_KINDS

DIAGNOSIS_SCHEMA_VERSION = 2  # 2: factor kind "task"; version-1 records still load

#: Failure modes and what each means (the descriptions go into critic prompts).
FAILURE_MODES: dict[str, str] = {
    "missed_grasp": "the gripper closed near the target object but never held it",
    "slip_during_transport": "the target was grasped and lifted but fell out before reaching the goal",
    "wrong_object": "the policy grasped or moved an object other than the one the instruction names",
    "wrong_target": "the right object was moved to the wrong container, object or region",
    "knocked_over": "the policy knocked an object over or off its place",
    "collision": "the gripper or a held object collided with the scene in a way that stopped progress",
    "no_progress": "the policy barely moved towards the task (stalled or oscillated)",
    "detour": "the policy moved in a long or wrong direction and ran out of time",
    "premature_release": "the object was released before it was over or inside the target",
    "imprecise_placement": "the object was released near, but not inside/on, the target",
    "drawer_not_operated": "the drawer was not opened or closed as instructed",
    "other": "none of the above; the explanation says what happened",
}
FailureMode = Literal[
    "missed_grasp",
    "slip_during_transport",
    "wrong_object",
    "wrong_target",
    "knocked_over",
    "collision",
    "no_progress",
    "detour",
    "premature_release",
    "imprecise_placement",
    "drawer_not_operated",
    "other",
]

STAGE_REACHED = ("none", *STAGE_KINDS)
StageReached = Literal["none", "reach", "grasp", "lift", "carry", "place", "push", "open", "close"]

_MAX_TEXT = 4000
_MAX_RAW = 20_000
MAX_REASON = 1000  # characters of a stored reason or note
MAX_NOTES = 16


def _notes(v: Any) -> tuple[str, ...]:
    items = [v] if isinstance(v, str) else list(v or ())
    return tuple(one_line(str(n), MAX_REASON) for n in items[:MAX_NOTES])


class DiagnosisError(CodaError, ValueError):
    """A diagnosis record (not model output) is invalid, e.g. read back from storage."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DiagnosisAnswer(_Frozen):
    """The fields a critic (or a language model) fills in; the JSON schema sent to endpoints is this one."""

    failure_mode: FailureMode  # one of FAILURE_MODES
    stage_reached: StageReached  # the furthest stage of the plan completed in order; "none" if none
    objects: tuple[str, ...] = Field(max_length=16)  # scene entity names implicated (target, distractor...)
    factors: tuple[SceneFactor, ...] = Field(max_length=8)  # scene factors implicated
    explanation: str = Field(min_length=1, max_length=_MAX_TEXT)  # what went wrong, in words
    stage_plan: str = Field(min_length=1, max_length=_MAX_TEXT)  # numbered plan in words that would succeed


class Diagnosis(DiagnosisAnswer):
    """A validated diagnosis, with where it came from."""

    schema_version: int = DIAGNOSIS_SCHEMA_VERSION
    record: Literal["diagnosis"] = "diagnosis"
    critic: str = ""  # name of the critic that wrote it
    episode_id: str | None = None  # the episode it diagnoses
    notes: tuple[str, ...] = ()  # provenance notes (fallbacks used, resolved phrases...), redacted, bounded

    _bounded_notes = field_validator("notes", mode="before")(classmethod(lambda cls, v: _notes(v)))

    def answer(self) -> DiagnosisAnswer:
        """The answer fields alone."""
        return DiagnosisAnswer.model_validate(self.model_dump(include=set(DiagnosisAnswer.model_fields)))


class DiagnosisRejected(_Frozen):
    """A critic answer that could not be used: the raw text and why. Kept, never used as a diagnosis."""

    schema_version: int = DIAGNOSIS_SCHEMA_VERSION
    record: Literal["rejected"] = "rejected"
    critic: str = ""
    episode_id: str | None = None
    reason: str  # one line: what was wrong (malformed JSON at..., field 'x' = ...: ...), at most MAX_REASON characters
    raw_text: str  # what the critic returned (truncated to 20 000 characters)
    notes: tuple[str, ...] = ()

    # Whatever a critic or an endpoint sent, what is kept is bounded and has no secret in it.
    _bounded_notes = field_validator("notes", mode="before")(classmethod(lambda cls, v: _notes(v)))

    @field_validator("reason", mode="before")
    @classmethod
    def _one_line_reason(cls, v: Any) -> str:
        return one_line(str(v), MAX_REASON) or "no reason given"

    @field_validator("raw_text", mode="before")
    @classmethod
    def _bounded_raw(cls, v: Any) -> str:
        return redact_bounded(str(v), _MAX_RAW)


CriticResult = Diagnosis | DiagnosisRejected


def diagnosis_json_schema() -> dict[str, Any]:
    """JSON schema of `DiagnosisAnswer` in the strict subset structured-output endpoints accept.

    Every property is required and no extra properties are allowed; length limits are enforced on our
    side by pydantic (several endpoints reject minLength/maxLength in strict mode).
    """
    schema: dict[str, Any] = _strict(DiagnosisAnswer.model_json_schema())
    return schema


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items() if k not in _DROP_KEYS}
        if out.get("type") == "object" and "properties" in out:
            out["required"] = list(out["properties"])
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


_DROP_KEYS = {"title", "default", "minLength", "maxLength", "minItems", "maxItems", "description"}


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*)\n\s*```$", re.DOTALL)


def parse_diagnosis(
    text: str | None,
    *,
    critic: str = "",
    episode_id: str | None = None,
    spec: ScenarioSpec | None = None,
    notes: tuple[str, ...] = (),
) -> CriticResult:
    """Parse a critic's raw answer into a Diagnosis, or a DiagnosisRejected with the reason.

    Accepted text: one JSON object, optionally wrapped in a single Markdown code fence. Nothing else is
    extracted from surrounding prose. With `spec`, implicated objects and factor entities must name entities
    of that scene.

    Never raises on bad model output; returns DiagnosisRejected instead.
    """
    raw = "" if text is None else str(text)

    def reject(reason: str) -> DiagnosisRejected:
        return DiagnosisRejected(
            critic=critic, episode_id=episode_id, reason=reason, raw_text=raw[:_MAX_RAW], notes=notes
        )

    body = raw.strip()
    if not body:
        return reject("empty answer")
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return reject(f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except RecursionError:
        return reject("malformed JSON: nested too deeply to parse")
    if not isinstance(data, dict):
        return reject(f"answer must be a JSON object, got {type(data).__name__}")
    try:
        answer = DiagnosisAnswer.model_validate(data)
    except ValidationError as e:
        return reject("off-schema: " + format_validation_error("diagnosis", e))
    if spec is not None:
        problem = scene_mismatch(answer, spec)
        if problem:
            return reject(problem)
    return Diagnosis(**answer.model_dump(), critic=critic, episode_id=episode_id, notes=notes)


def scene_mismatch(answer: DiagnosisAnswer, spec: ScenarioSpec) -> str | None:
    """Why an answer's entity names do not fit the scene, or None if they do."""
    names = set(entity_kinds(spec))
    for i, o in enumerate(answer.objects):
        if o not in names:
            return f"diagnosis field 'objects.{i}' = {o!r} is not an entity of the scene (have {sorted(names)})"
    for i, f in enumerate(answer.factors):
        if f.entity is not None and f.entity not in names:
            return f"diagnosis field 'factors.{i}.entity' = {f.entity!r} is not an entity of the scene (have {sorted(names)})"
    return None


def record_from_json(text: str) -> CriticResult:
    """Read back a stored Diagnosis or DiagnosisRejected (by its `record` field).

    Raises:
        DiagnosisError: the text is not a valid stored record.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DiagnosisError(f"diagnosis record JSON is malformed: {e.msg} at line {e.lineno}") from None
    kind = data.get("record") if isinstance(data, dict) else None
    model: type[Diagnosis] | type[DiagnosisRejected]
    if kind == "diagnosis":
        model = Diagnosis
    elif kind == "rejected":
        model = DiagnosisRejected
    else:
        raise DiagnosisError(f"diagnosis record field 'record' = {kind!r} must be 'diagnosis' or 'rejected'")
    v = data.get("schema_version", DIAGNOSIS_SCHEMA_VERSION)
    if isinstance(v, int) and v > DIAGNOSIS_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"diagnosis record field 'schema_version' = {v} is newer than this CoDA reads ({DIAGNOSIS_SCHEMA_VERSION})"
        )
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise DiagnosisError(format_validation_error("diagnosis record", e)) from None


def prompt_taxonomy() -> str:
    """The failure modes and factor kinds as text for a critic prompt."""
    modes = "\n".join(f"- {k}: {v}" for k, v in FAILURE_MODES.items())
    factors = "\n".join(f"- {k}: {v}" for k, v in FACTOR_KINDS.items())
    stages = ", ".join(STAGE_REACHED)
    return f"Failure modes:\n{modes}\n\nScene factor kinds:\n{factors}\n\nstage_reached is one of: {stages}."
