"""The record kinds of the shared memory, as typed SQLAlchemy 2 models.

Every record carries the run it belongs to (`run_id`), the round that wrote it (`round`) and the phase that
wrote it (`phase`); those three are filled in by the phase transaction that adds it. Each kind has a natural
unique key (`__natural_key__`) so that a replayed phase cannot duplicate rows, plus an integer surrogate `id`
that other records reference. Records are plain data: no relationships are loaded behind the caller's back,
so a record read from memory stays usable after its session has closed.

Large payloads (state traces, keyframes, checkpoints) are not stored here: records hold artifact references
(`{"path": relative path in the run directory, "sha256": ..., "size": ...}`, see `coda.memory.artifacts`).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    event,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from coda.redact import redact_bounded, redact_value

if TYPE_CHECKING:
    from coda.scene.spec import ScenarioSpec

# Text columns: a reason is one bounded line's worth, any other text (raw answers, descriptions) at most TEXT_LEN.
REASON_LEN = 1000
TEXT_LEN = 20_000

# Names: identifiers short enough to be readable in `coda memory ls`, long enough for generated keys.
NAME_LEN = 128
KEY_LEN = 256
PATH_LEN = 1024


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite has no time zones: store naive UTC)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"timestamp {value.isoformat()} has no time zone; use datetime.now(timezone.utc)")
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    return dt.datetime.now(dt.timezone.utc)


class Base(DeclarativeBase):
    """Base of all memory tables."""

    __kind__: ClassVar[str]  # the record kind's public name ("episode", "failure_mode", ...)
    __natural_key__: ClassVar[tuple[str, ...]]  # attributes that identify the record besides its id

    if TYPE_CHECKING:  # every table has an `id` (an int; a run's is its name)
        id: Any

    def to_dict(self) -> dict[str, Any]:
        """The record's columns as a JSON-ready mapping (timestamps as ISO 8601 strings)."""
        out: dict[str, Any] = {}
        for col in self.__table__.columns:
            value = getattr(self, col.key)
            out[col.key] = value.isoformat() if isinstance(value, dt.datetime) else value
        return out

    def natural_key(self) -> dict[str, Any]:
        """The values of the natural key, e.g. `{"run_id": "r1", "round": 2, "spec_id": "ab12..."}`."""
        return {k: getattr(self, k) for k in self.__natural_key__}

    def __repr__(self) -> str:
        names = dict.fromkeys(("id", *self.__natural_key__))  # ordered, without repeating `id`
        keys = ", ".join(f"{k}={getattr(self, k)!r}" for k in names)
        return f"{type(self).__name__}({keys})"


@event.listens_for(Base, "before_insert", propagate=True)
@event.listens_for(Base, "before_update", propagate=True)
def _no_secret_no_unbounded_text(mapper: Any, connection: Any, target: Base) -> None:
    """Before any record is written: secrets redacted in every text and JSON column, text cut to its bound."""
    for col in target.__table__.columns:
        value = getattr(target, col.key, None)
        if value is None:
            continue
        if isinstance(col.type, Text) and isinstance(value, str):
            limit = REASON_LEN if col.key.endswith("reason") else TEXT_LEN
            setattr(target, col.key, redact_bounded(value, limit))
        elif isinstance(col.type, JSON):
            clean = redact_value(value)
            if clean != value:
                setattr(target, col.key, clean)


class RecordMixin:
    """Columns every record (except the run itself) carries: id, run, round and the phase that wrote it."""

    # sort_order: these lead every table, so `SELECT *` shows id, run_id, round, phase first.
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True, sort_order=-4)
    run_id: Mapped[str] = mapped_column(String(NAME_LEN), ForeignKey("runs.id"), nullable=False, sort_order=-3)
    round: Mapped[int] = mapped_column(Integer, nullable=False, sort_order=-2)  # round that wrote the record
    phase: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False, sort_order=-1)  # phase that wrote it


class Run(Base):
    """One run of the engine: its resolved configuration, seed, strategy and status."""

    __tablename__ = "runs"
    __kind__ = "run"
    __natural_key__ = ("id",)

    id: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)  # run name, e.g. the run directory's
    created: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # resolved CodaConfig as JSON
    seed: Mapped[int] = mapped_column(Integer, nullable=False)  # master seed
    strategy: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False)  # coda, dr, plr, ...
    status: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False, default="running")


class PhaseMarker(Base):
    """The commit evidence of one phase of one round: it exists if and only if the phase committed."""

    __tablename__ = "phases"
    __kind__ = "phase"
    __natural_key__ = ("run_id", "round", "phase")
    __table_args__ = (UniqueConstraint("run_id", "round", "phase", name="uq_phases_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(NAME_LEN), ForeignKey("runs.id"), nullable=False)
    round: Mapped[int] = mapped_column(Integer, nullable=False)
    phase: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False)  # evaluate, diagnose, ...
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    committed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class _ProgramMixin(RecordMixin):
    key: Mapped[str] = mapped_column(String(KEY_LEN), nullable=False)  # unique within (run, round)
    body: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # the program as data
    failure_mode_id: Mapped[int | None] = mapped_column(ForeignKey("failure_modes.id"), nullable=True)


class GenerationProgram(_ProgramMixin, Base):
    """A declarative, seeded recipe of new scenes (base selector + operators + seed + budget)."""

    __tablename__ = "generation_programs"
    __kind__ = "generation_program"
    __natural_key__ = ("run_id", "round", "key")
    __table_args__ = (UniqueConstraint("run_id", "round", "key", name="uq_generation_programs_key"),)

    parent_id: Mapped[int | None] = mapped_column(ForeignKey("generation_programs.id"), nullable=True)


class TrainingProgram(_ProgramMixin, Base):
    """What data and supervision the policy gets for one failure mode (demos, corrections, potential, weights)."""

    __tablename__ = "training_programs"
    __kind__ = "training_program"
    __natural_key__ = ("run_id", "round", "key")
    __table_args__ = (UniqueConstraint("run_id", "round", "key", name="uq_training_programs_key"),)

    parent_id: Mapped[int | None] = mapped_column(ForeignKey("training_programs.id"), nullable=True)


class Scenario(RecordMixin, Base):
    """One scene (a ScenarioSpec as JSON), its split and whether it passed the validity checks."""

    __tablename__ = "scenarios"
    __kind__ = "scenario"
    __natural_key__ = ("run_id", "round", "spec_id")
    __table_args__ = (
        UniqueConstraint("run_id", "round", "spec_id", name="uq_scenarios_key"),
        Index("ix_scenarios_spec_id", "spec_id"),
    )

    spec_id: Mapped[str] = mapped_column(String(64), nullable=False)  # ScenarioSpec.spec_id (content hash)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # ScenarioSpec as a JSON object
    family: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False)  # pick_place, stack, push, drawer
    split: Mapped[str | None] = mapped_column(String(NAME_LEN), nullable=True)  # sft, ood_position, probe, ...
    valid: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)  # passed the validity checks
    invalid_reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why not, when not valid
    program_id: Mapped[int | None] = mapped_column(ForeignKey("generation_programs.id"), nullable=True)

    @classmethod
    def from_spec(
        cls,
        spec: "ScenarioSpec",
        *,
        split: str | None = None,
        valid: bool = True,
        invalid_reason: str | None = None,
        program_id: int | None = None,
    ) -> "Scenario":
        """A record for `spec` (spec_id, family and JSON taken from the spec).

        Args:
            spec: the scene.
            split: the split it belongs to, if any.
            valid: whether it passed the validity checks; `invalid_reason` says why not.
            program_id: id of the generation program that made it, if any.

        Returns:
            An unsaved Scenario; add it through a phase transaction.
        """
        return cls(
            spec_id=spec.spec_id,
            spec=spec.to_dict(),
            family=spec.family,
            split=split,
            valid=valid,
            invalid_reason=invalid_reason,
            program_id=program_id,
        )


class Checkpoint(RecordMixin, Base):
    """A policy checkpoint file in the run directory, with its checksum and metrics."""

    __tablename__ = "checkpoints"
    __kind__ = "checkpoint"
    __natural_key__ = ("run_id", "path")
    __table_args__ = (UniqueConstraint("run_id", "path", name="uq_checkpoints_key"),)

    path: Mapped[str] = mapped_column(String(PATH_LEN), nullable=False)  # relative to the run directory
    sha256: Mapped[str] = mapped_column(String(64), nullable=False)  # checksum of the file
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


class Episode(RecordMixin, Base):
    """One rollout of a policy in a scenario: outcome, return, length, stage reached, artifact references."""

    __tablename__ = "episodes"
    __kind__ = "episode"
    __natural_key__ = ("run_id", "round", "phase", "scenario_id", "policy", "seed")
    __table_args__ = (
        UniqueConstraint("run_id", "round", "phase", "scenario_id", "policy", "seed", name="uq_episodes_key"),
    )

    scenario_id: Mapped[int] = mapped_column(ForeignKey("scenarios.id"), nullable=False, index=True)
    policy: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False)  # "policy", "expert", "sft", ...
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True)
    seed: Mapped[int] = mapped_column(Integer, nullable=False, default=0)  # rollout seed
    success: Mapped[bool] = mapped_column(Boolean, nullable=False)
    episode_return: Mapped[float] = mapped_column(Float, nullable=False)  # undiscounted sum of rewards
    length: Mapped[int] = mapped_column(Integer, nullable=False)  # control steps
    stage_reached: Mapped[str | None] = mapped_column(String(NAME_LEN), nullable=True)  # e.g. "grasp(obj0)"
    artifacts: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)  # name -> ArtifactRef dict
    info: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)  # anything else, JSON


class FailureMode(RecordMixin, Base):
    """A cluster of verified diagnoses: a key, a description, an optional text embedding, first/last round."""

    __tablename__ = "failure_modes"
    __kind__ = "failure_mode"
    __natural_key__ = ("run_id", "key")
    __table_args__ = (UniqueConstraint("run_id", "key", name="uq_failure_modes_key"),)

    key: Mapped[str] = mapped_column(String(KEY_LEN), nullable=False)  # e.g. "position:far_left"
    description: Mapped[str] = mapped_column(Text, nullable=False)
    embedding: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)  # sentence embedding
    last_round: Mapped[int] = mapped_column(Integer, nullable=False)  # last round it was observed

    @property
    def first_round(self) -> int:
        """The round that first recorded the failure mode (its `round`)."""
        return self.round


class Diagnosis(RecordMixin, Base):
    """A critic's diagnosis of one episode, kept whether accepted or rejected (with the reason)."""

    __tablename__ = "diagnoses"
    __kind__ = "diagnosis"
    __natural_key__ = ("run_id", "round", "episode_id", "critic")
    __table_args__ = (UniqueConstraint("run_id", "round", "episode_id", "critic", name="uq_diagnoses_key"),)

    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"), nullable=False, index=True)
    critic: Mapped[str] = mapped_column(String(NAME_LEN), nullable=False)  # registered critic name
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # parsed Diagnosis; None if malformed
    raw: Mapped[str | None] = mapped_column(Text, nullable=True)  # the critic's raw answer
    accepted: Mapped[bool] = mapped_column(Boolean, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why rejected
    failure_mode_id: Mapped[int | None] = mapped_column(ForeignKey("failure_modes.id"), nullable=True)


class Verdict(RecordMixin, Base):
    """The verification of one diagnosis: per-check results and whether it passed."""

    __tablename__ = "verdicts"
    __kind__ = "verdict"
    __natural_key__ = ("run_id", "round", "diagnosis_id")
    __table_args__ = (UniqueConstraint("run_id", "round", "diagnosis_id", name="uq_verdicts_key"),)

    diagnosis_id: Mapped[int] = mapped_column(ForeignKey("diagnoses.id"), nullable=False, index=True)
    checks: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # check name -> result
    passed: Mapped[bool] = mapped_column(Boolean, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # first failed check, in words


class Potential(RecordMixin, Base):
    """The staged potential (Text2potential stage program) compiled for one failure mode in one round."""

    __tablename__ = "potentials"
    __kind__ = "potential"
    __natural_key__ = ("run_id", "round", "failure_mode_id")
    __table_args__ = (UniqueConstraint("run_id", "round", "failure_mode_id", name="uq_potentials_key"),)

    failure_mode_id: Mapped[int] = mapped_column(ForeignKey("failure_modes.id"), nullable=False)
    stage_program: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    accepted: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)  # rises along expert demos
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why rejected


class LearningProgress(RecordMixin, Base):
    """Success on held-apart probe scenes of one failure mode before vs after training, and its budget share."""

    __tablename__ = "learning_progress"
    __kind__ = "progress"
    __natural_key__ = ("run_id", "round", "failure_mode_id")
    __table_args__ = (UniqueConstraint("run_id", "round", "failure_mode_id", name="uq_learning_progress_key"),)

    failure_mode_id: Mapped[int] = mapped_column(ForeignKey("failure_modes.id"), nullable=False)
    before: Mapped[float] = mapped_column(Float, nullable=False)  # success rate before training
    after: Mapped[float] = mapped_column(Float, nullable=False)  # success rate after training
    budget_share: Mapped[float] = mapped_column(Float, nullable=False)  # share of next round's budget

    @property
    def progress(self) -> float:
        """after - before."""
        return self.after - self.before


# Record kinds in dependency order (a kind only references kinds before it, or itself).
RECORD_KINDS: tuple[type[Base], ...] = (
    Run,
    PhaseMarker,
    FailureMode,
    GenerationProgram,
    TrainingProgram,
    Scenario,
    Checkpoint,
    Episode,
    Diagnosis,
    Verdict,
    Potential,
    LearningProgress,
)

__all__ = [
    "Base",
    "Checkpoint",
    "Diagnosis",
    "Episode",
    "FailureMode",
    "GenerationProgram",
    "LearningProgress",
    "PhaseMarker",
    "Potential",
    "RECORD_KINDS",
    "Run",
    "Scenario",
    "TrainingProgram",
    "Verdict",
    "utcnow",
]
