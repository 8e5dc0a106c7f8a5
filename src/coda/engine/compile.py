"""Compile a failure mode into its programs: the level of its next generation program, and its training program.

**Generation programs** are the simulator's (`SimBackend.mode_program`: the tabletop's scene programs in
`coda.sim.tabletop.programs`, LIBERO's BDDL edits in `coda.sim.libero.factors`). What is the engine's is
the level a mode's next program has, by learning progress (`next_level`): solved → level + 1 (wider), stuck
→ level − 1 (narrower), or, stuck at level 0, the same level flagged for re-diagnosis; progressing → the
same level with a fresh seed.

**Training programs.** `compile_training_program(...)` says what the policy trains on for a mode: expert
demos in the generated scenes, corrective demos from the failure states (episode id + the step labelling
starts from), the mode's staged potential — the stage plan of its diagnoses that compiles most often
(plans vote by their role template, the simulator's `entity_roles` in place of entity names, so the same
plan over different scenes counts once per diagnosis) — and data weights. It is a pydantic model dumped to
JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coda.critic.diagnosis import Diagnosis
from coda.engine.modes import Mode, ModeError, parse_mode_key
from coda.scene.factors import CompileError
from coda.scene.generators import validation_message
from coda.scene.spec import ScenarioSpec
from coda.shaping.program import StageProgram
from coda.shaping.text2potential import PlanRejected, try_parse_plan

BODY_SCHEMA_VERSION = 1
MAX_LEVEL = 6  # hard ceiling; EngineConfig.max_level and the simulator's `max_level` pick the run's
Outcome = Literal["active", "solved", "stuck"]
OUTCOMES: tuple[Outcome, ...] = ("active", "solved", "stuck")


def next_level(level: int, outcome: str, max_level: int) -> tuple[int, str, bool]:
    """(level, reason, rediagnose) of a mode's next program after one at `level` with that learning-progress
    outcome (see `child_program`)."""
    if outcome not in OUTCOMES:
        raise CompileError(f"outcome = {outcome!r} must be one of {list(OUTCOMES)}")
    if not isinstance(max_level, int) or not 0 <= max_level <= MAX_LEVEL:
        raise CompileError(f"max_level = {max_level!r} must be an integer in 0..{MAX_LEVEL}")
    parent_level, level, flag = level, min(level, max_level), False
    if outcome == "solved":
        if level < max_level:
            level, why = level + 1, f"solved at level {parent_level}: wider"
        else:
            why = f"solved at the widest level {level}: the mode can retire"
    elif outcome == "stuck":
        if level > 0:
            level, why = level - 1, f"no progress at level {parent_level}: narrower"
        else:
            flag, why = True, "no progress at level 0: diagnose the mode again"
    else:
        why = f"progressing at level {level}: more of the same"
    return level, why, flag


# ---- training programs ---------------------------------------------------------------------------------


class CorrectiveDemo(BaseModel):
    """Relabel a failed episode with expert chunks from `start_step` on (the failure state)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episode_id: str = Field(min_length=1)
    start_step: int = Field(default=0, ge=0)


class DataWeights(BaseModel):
    """Relative weights of the data sources in training batches (normalised by the trainer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expert: float = Field(default=1.0, ge=0)  # expert demos in the generated scenes
    corrective: float = Field(default=0.0, ge=0)  # corrective demos from the failure states
    replay: float = Field(default=1.0, ge=0)  # SFT demos, replayed against forgetting

    @model_validator(mode="after")
    def _some(self) -> DataWeights:
        if self.expert + self.corrective + self.replay <= 0:
            raise ValueError(f"weights (expert {self.expert}, corrective {self.corrective}, replay {self.replay}) must not all be 0")
        return self


class RoleStage(BaseModel):
    """A stage over roles instead of entity names, so a potential carries over to generated scenes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    roles: tuple[str, ...]
    value: float | None = None


class TrainingProgramBody(BaseModel):
    """What the policy trains on for one failure mode (the memory's TrainingProgram record body)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = BODY_SCHEMA_VERSION
    mode: str  # failure mode key
    generation_program: str  # key of the generation program whose scenes get expert demos
    expert_demos: int = Field(ge=0)  # expert demonstrations to collect in the generated scenes
    corrective: tuple[CorrectiveDemo, ...] = ()  # failed episodes to relabel, from their failure step
    potential: dict[str, Any] | None = None  # StageProgram JSON over the source scene's entity names
    potential_template: tuple[RoleStage, ...] | None = None  # the same stages over roles (bind_potential)
    potential_plan: str | None = None  # the stage plan in words it came from
    potential_episode: str | None = None  # the episode whose scene it was compiled on
    potential_votes: int = Field(default=0, ge=0)  # diagnoses whose plan compiled to this template
    plans_compiled: int = Field(default=0, ge=0)  # diagnoses whose plan compiled at all
    potential_reason: str = ""  # why there is no potential, when there is none
    weights: DataWeights = Field(default_factory=DataWeights)

    @model_validator(mode="after")
    def _check(self) -> TrainingProgramBody:
        parse_mode_key(self.mode)
        if (self.potential is None) != (self.potential_template is None):
            raise ValueError("potential and potential_template must be given together")
        if self.potential is not None:
            StageProgram.from_data(self.potential)
        if self.potential_votes > self.plans_compiled:
            raise ValueError(f"potential_votes {self.potential_votes} exceeds plans_compiled {self.plans_compiled}")
        return self


def load_training_program(data: Mapping[str, Any]) -> TrainingProgramBody:
    """Validate a stored training-program body. Raises CompileError naming the field."""
    try:
        return TrainingProgramBody.model_validate(dict(data))
    except ValidationError as e:
        raise CompileError(validation_message("training program", e)) from None
    except ModeError as e:
        raise CompileError(f"training program: {e}") from None


def role_template(program: StageProgram, roles: Mapping[str, str]) -> tuple[RoleStage, ...]:
    """A stage program's stages with entity names replaced by their roles (`roles`: the simulator's
    `entity_roles` of the scene; an entity without a role keeps its name)."""
    return tuple(RoleStage(kind=s.kind, roles=tuple(roles.get(a, a) for a in s.args), value=s.value) for s in program.stages)


def plan_template(plan: str, spec: ScenarioSpec, roles: Mapping[str, str]) -> tuple[StageProgram, tuple[RoleStage, ...]] | PlanRejected:
    """A stage plan compiled on a scene, with its role template; PlanRejected when it does not compile."""
    prog = try_parse_plan(plan, spec)
    return prog if isinstance(prog, PlanRejected) else (prog, role_template(prog, roles))


def bind_potential(template: Sequence[RoleStage], spec: ScenarioSpec, roles: Mapping[str, str]) -> StageProgram:
    """A role template bound to a scene's entities: each role to the first entity that has it in `roles` (the
    scene's `entity_roles`, in scene order), a name that is no role to that entity.

    Raises:
        CompileError: the scene lacks an entity of a role, or the stages do not fit its entity kinds.
    """
    from coda.shaping.program import ProgramError as StageProgramError
    from coda.shaping.program import Stage

    first: dict[str, str] = {}
    for name, role in roles.items():
        first.setdefault(role, name)
    stages = []
    for i, st in enumerate(template):
        names = []
        for r in st.roles:
            name = first.get(r) or (r if r in roles else None)
            if name is None:
                raise CompileError(f"potential_template[{i}]: role '{r}' has no entity in scene {spec.spec_id}")
            names.append(name)
        stages.append(Stage(kind=st.kind, args=tuple(names), value=st.value))  # type: ignore[arg-type]
    try:
        return StageProgram(stages=tuple(stages)).check_scene(spec)
    except StageProgramError as e:
        raise CompileError(f"potential_template does not fit scene {spec.spec_id}: {e}") from None


def corrective_start(phi: Sequence[float], back: int = 5) -> int:
    """The step corrective labelling starts from: `back` steps before Φ first reached its maximum along
    the failed episode (the last point of progress), never below 0."""
    if len(phi) == 0:
        return 0
    best = max(phi)
    first = next(i for i, v in enumerate(phi) if v == best)
    return max(0, first - max(0, back))


def compile_training_program(
    mode: Mode | str,
    diagnoses: Sequence[Diagnosis],
    program_key: str,
    *,
    scenes: Mapping[str, ScenarioSpec],
    expert_demos: int,
    weights: DataWeights | None = None,
    start_steps: Mapping[str, int] | None = None,
    template_of: Callable[[str, Any], Any],
) -> dict[str, Any]:
    """The training program of a mode, as a JSON-ready dict (a validated `TrainingProgramBody`).

    Args:
        mode: the failure mode (or its key).
        diagnoses: the mode's diagnoses (their failure mode must match the mode's); each one's episode
            becomes a corrective demo.
        program_key: key of the generation program whose scenes get the expert demos.
        scenes: episode id -> scene, to compile each diagnosis's stage plan.
        expert_demos: number of expert demos to collect in the generated scenes.
        weights: data weights (default DataWeights()).
        start_steps: episode id -> step corrective labelling starts from (see `corrective_start`; default 0).
        template_of: a stage plan on its scene -> (StageProgram, role template) or PlanRejected (the
            round backend's `plan_template`).

    Returns:
        `TrainingProgramBody.model_dump(mode="json")`.

    Raises:
        CompileError: a diagnosis of another failure mode or without an episode/scene, a negative count or
            start step, an empty program key. ModeError: a malformed mode key.
    """
    key = mode.key if isinstance(mode, Mode) else mode
    fm, _ = parse_mode_key(key)  # the grammar only: the tokens are the backend's
    if not program_key:
        raise CompileError(f"program_key = {program_key!r} must name the mode's generation program")
    if not isinstance(expert_demos, int) or expert_demos < 0:
        raise CompileError(f"expert_demos = {expert_demos!r} must be a non-negative integer")
    starts = dict(start_steps or {})
    corrective: list[CorrectiveDemo] = []
    votes: dict[tuple[RoleStage, ...], list[int]] = {}
    compiled: dict[int, StageProgram] = {}
    rejections: list[str] = []
    for i, d in enumerate(diagnoses):
        if d.failure_mode != fm:
            raise CompileError(f"diagnoses[{i}].failure_mode = {d.failure_mode!r} does not belong to mode {key!r}")
        if d.episode_id is None:
            raise CompileError(f"diagnoses[{i}].episode_id is None: a corrective demo needs the failed episode")
        if d.episode_id not in scenes:
            raise CompileError(f"diagnoses[{i}].episode_id = {d.episode_id!r} has no scene in scenes")
        step = starts.get(d.episode_id, 0)
        if not isinstance(step, int) or step < 0:
            raise CompileError(f"start_steps[{d.episode_id!r}] = {step!r} must be a non-negative integer")
        if all(c.episode_id != d.episode_id for c in corrective):
            corrective.append(CorrectiveDemo(episode_id=d.episode_id, start_step=step))
        made = template_of(d.stage_plan, scenes[d.episode_id])
        if isinstance(made, PlanRejected):
            rejections.append(f"diagnoses[{i}]: {made.reason}")
            continue
        compiled[i], template = made
        votes.setdefault(tuple(template), []).append(i)
    body: dict[str, Any] = {
        "mode": key, "generation_program": program_key, "expert_demos": expert_demos,
        "corrective": corrective, "weights": weights or DataWeights(), "plans_compiled": len(compiled),
    }
    if votes:
        # most votes wins; ties go to the template whose first diagnosis comes first
        template, members = max(votes.items(), key=lambda kv: (len(kv[1]), -kv[1][0]))
        src = members[0]
        episode = diagnoses[src].episode_id
        body.update(potential=compiled[src].model_dump(mode="json"), potential_template=template,
                    potential_plan=diagnoses[src].stage_plan, potential_episode=episode, potential_votes=len(members))
    else:
        body["potential_reason"] = ("no diagnosis given" if not diagnoses else
                                    f"no stage plan compiles ({len(rejections)} rejected; first: {rejections[0]})")
    try:
        return TrainingProgramBody.model_validate(body).model_dump(mode="json")
    except ValidationError as e:
        raise CompileError(validation_message("training program", e)) from None


__all__ = [
    "CompileError",
    "CorrectiveDemo",
    "DataWeights",
    "MAX_LEVEL",
    "RoleStage",
    "TrainingProgramBody",
    "bind_potential",
    "compile_training_program",
    "corrective_start",
    "load_training_program",
    "next_level",
    "plan_template",
    "role_template",
]
