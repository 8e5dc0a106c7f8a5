"""Compile a failure mode into programs: a generation program (new scenes) and a training program (data).

**Generation programs.** `compile_generation_program(mode, examples, family, seed, budget, level)` builds a
`coda.scene.programs.GenerationProgram` whose base is the family's training distribution (the sft split's
base parameters) and whose operators apply the mode's factors, turned into operator calls by
`coda.critic.verify.factor_ops`, with variation around them whose width grows with `level`:

| factor token               | level 0 (exactly the factor)        | each level up                                      |
| -------------------------- | ----------------------------------- | -------------------------------------------------- |
| ``position[@r]:<region>``  | place the entity in that region     | + grid cells one step further (a spot → its cell)  |
| ``position:robot_start``   | default start-pose offsets          | offset ranges × 1.5, 2, ...                        |
| ``object[@r]:color=c``     | recolour to c                       | + the next two palette colours                      |
| ``object[@r]:size=w``      | that size band                      | a wider scale range                                 |
| ``object[@r]:shape=s``     | reshape to s                        | any other shape                                     |
| ``distractor``             | one look-alike next to the target   | more look-alikes; random ones anywhere from level 2 |
| ``physics:<p>=low|high``   | ±10 % around a typical low/high     | ±20 %, ±30 %, ...                                   |
| ``instruction``            | full-synonym train-tier paraphrase  | + another task in the same layout, more often       |
| ``task``                   | another goal in the same layout     | + a train-tier paraphrase of it, more often         |

The entities of several position factors are placed together (one `place_together` call), so that
they can trade areas.

From level 2 on, a share of the scenes (1/2 at level 2, 2/3 at level 3, ...) also gets one factor of
another axis (the gripper's start, a random distractor, friction, a paraphrase): combined factors.
Instruction edits go last, since operators refuse to reword an already paraphrased instruction; a task
change rewrites the instruction, so it goes after the other factors and before the combined ones and
every paraphrase.

The result is a `ModeProgram`: the scene program plus its lineage (mode key, level, parent key), whose
`body()` is what the memory's GenerationProgram record stores; `child_program(parent, outcome)` evolves it
by learning progress (solved → level + 1, stuck → level − 1, or re-diagnosis at level 0).

**Training programs.** `compile_training_program(...)` says what the policy trains on for a mode: expert
demos in the generated scenes, corrective demos from the failure states (episode id + the step labelling
starts from), the mode's staged potential — the stage plan of its diagnoses that compiles most often
(plans vote by their role template, so the same plan over different scenes counts once per diagnosis) —
and data weights. It is a pydantic model dumped to JSON.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coda.critic.diagnosis import Diagnosis, SceneFactor
from coda.engine.modes import Mode, ModeError, entity_for_role, parse_mode_key, role_of
from coda.engine.widening import combined_factors, merge_placements, neighbourhood, widen
from coda.errors import CodaError
from coda.scene.factors import FactorError
from coda.scene.generators import validation_message
from coda.scene.programs import GenerationProgram, ProgramError, make_scene
from coda.scene.spec import FAMILIES, ScenarioSpec
from coda.scene.splits import SFT_PARAMS, split_program
from coda.shaping.program import StageProgram
from coda.shaping.text2potential import PlanRejected, try_parse_plan
from coda.sim.tabletop.factors import factor_ops

BODY_SCHEMA_VERSION = 1
MAX_LEVEL = 6  # hard ceiling; EngineConfig.max_level picks the run's
Outcome = Literal["active", "solved", "stuck"]
OUTCOMES: tuple[Outcome, ...] = ("active", "solved", "stuck")

# Typical values of a "low" / "high" physics factor (the OOD physics split's ranges' centres).
_PHYSICS_MID = {("friction", "low"): 0.4, ("friction", "high"): 2.0, ("mass", "low"): 0.4, ("mass", "high"): 3.0}


class CompileError(CodaError, ValueError):
    """A mode cannot be compiled into a program, or a program body is invalid; the message names the field."""


# ---- generation programs -------------------------------------------------------------------------------


class ModeProgram(BaseModel):
    """A generation program compiled for a failure mode, with its lineage.

    Attributes:
        key: unique name of the program (also the scene program's name, recorded in scene provenance).
        mode: the failure mode's key.
        family: task family of its scenes.
        level: variation width (0 = exactly the factors).
        parent: key of the program it evolved from (None for a first program).
        program: the scene generation program (runs with `coda.scene.programs.run_program`).
        reason: why it was made (for children: the outcome that decided the level).
        rediagnose: the mode made no progress even at level 0; the engine should diagnose it again.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = BODY_SCHEMA_VERSION
    key: str
    mode: str
    family: str
    level: int = Field(ge=0, le=MAX_LEVEL)
    parent: str | None = None
    program: GenerationProgram
    reason: str = ""
    rediagnose: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> ModeProgram:
        parse_mode_key(self.mode)
        if self.key != self.program.name:
            raise ValueError(f"key {self.key!r} differs from program.name {self.program.name!r}")
        if self.family != self.program.base.family:
            raise ValueError(f"family {self.family!r} differs from program.base.family {self.program.base.family!r}")
        return self

    def body(self) -> dict[str, Any]:
        """The JSON body the memory's GenerationProgram record stores (`from_body` reads it back)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ModeProgram:
        """Validate a stored body. Raises CompileError naming the field."""
        try:
            return cls.model_validate(dict(body))
        except ValidationError as e:
            raise CompileError(validation_message("generation program body", e)) from None


def reference_scene(family: str) -> ScenarioSpec:
    """A fixed sft scene of the family, used to map roles to entity names for `factor_ops`."""
    return make_scene(split_program(family, "sft", 1, 0), 0)


def _factor(token: str, ref: ScenarioSpec, family: str, where: str) -> tuple[SceneFactor, str]:
    """The SceneFactor a token stands for in the reference scene, and the role it concerns."""
    m = re.match(r"^([a-z_]+)(?:@([a-z_]+))?(?::(.*))?$", token)
    assert m is not None  # tokens were validated by parse_mode_key
    kind, role, value = m.group(1), m.group(2) or "target", m.group(3) or ""
    entity = None
    if kind in ("position", "object") and value != "robot_start":
        entity = entity_for_role(role, ref)
        if entity is None:
            raise CompileError(f"{where}: factor '{token}' concerns the '{role}' entity, which {family} scenes lack")
    if kind == "position":
        return SceneFactor(kind="position", entity=entity, value=value, detail=""), role
    if kind == "object":
        return SceneFactor(kind="object_attribute", entity=entity, value=value, detail=""), role
    if kind == "physics":
        name, _, direction = value.partition("=")
        text = "damping" if name == "damping" else f"{name}_scale={_PHYSICS_MID[(name, direction)]}"
        return SceneFactor(kind="physics", entity=None, value=text, detail=""), role
    return SceneFactor(kind=kind, entity=None, value=kind, detail=""), role  # type: ignore[arg-type]


def program_name(mode: str, family: str, level: int, seed: int) -> str:
    """A readable, unique program name: `family/failure_mode/tokens@L<level>s<seed>` (120 characters at most)."""
    slug = re.sub(r"[^A-Za-z0-9_.:/@-]", "-", mode.replace("|", "/").replace("+", ","))
    tail = f"@L{level}s{seed}"
    name = f"{family}/{slug}{tail}"
    if len(name) > 120:
        h = hashlib.sha256(mode.encode()).hexdigest()[:8]
        name = f"{family}/{slug[: 120 - len(family) - len(tail) - 11]}~{h}{tail}"
    return name


def _mode_key(mode: Mode | str) -> str:
    key = mode.key if isinstance(mode, Mode) else mode
    parse_mode_key(key, "mode")
    return key


def _mode_ops(key: str, tokens: Sequence[str], ref: ScenarioSpec, family: str, level: int) -> list[dict[str, Any]]:
    """The operator calls of a mode's factor tokens at `level`, in program order (see the module docstring)."""
    ops: list[dict[str, Any]] = []
    task: list[dict[str, Any]] = []
    wording: list[dict[str, Any]] = []
    for t in tokens:
        factor, _ = _factor(t, ref, family, f"mode = {key!r}")
        try:
            base_ops = factor_ops(factor, ref, "train")
        except FactorError as e:
            raise CompileError(f"mode = {key!r}: factor '{t}' has no operator form: {e}") from None
        widened = widen(t, base_ops, level)
        if t == "task":  # change_task rewrites the instruction; its rewording share joins the wording edits
            task.append(widened[0])
            wording.extend(widened[1:])
        else:
            (wording if t == "instruction" else ops).extend(widened)
    ops = merge_placements(ops)
    return ops + task + combined_factors(tokens, family, level) + wording  # instruction edits last


def compile_generation_program(
    mode: Mode | str,
    examples: Sequence[ScenarioSpec],
    family: str,
    seed: int,
    budget: int,
    level: int = 0,
    *,
    parent: str | None = None,
    reason: str = "",
) -> ModeProgram:
    """A generation program that reproduces a mode's factors in the family's training distribution.

    Args:
        mode: the failure mode (or its key); it must have at least one factor token.
        examples: scenes the mode was diagnosed in; the first of `family` maps roles to entity names for
            `factor_ops` (else a fixed sft scene of the family does).
        family: task family of the new scenes.
        seed: the program's seed (same seed, same scenes).
        budget: number of scenes.
        level: variation width, 0 = exactly the factors (see the module docstring).
        parent: key of the program this one evolves from.
        reason: why it was made (recorded in the body).

    Returns:
        ModeProgram; its `program` is a validated GenerationProgram whose first scene was made as a check.

    Raises:
        ModeError: unknown failure mode or malformed key. CompileError: bad family/seed/budget/level, a mode
            without factors, a factor the family cannot express, or a program that cannot make its scenes.
    """
    key = _mode_key(mode)
    _, tokens = parse_mode_key(key)
    if family not in FAMILIES:
        raise CompileError(f"family = {family!r} is unknown. Available: {list(FAMILIES)}")
    if not isinstance(level, int) or not 0 <= level <= MAX_LEVEL:
        raise CompileError(f"level = {level!r} must be an integer in 0..{MAX_LEVEL}")
    if not isinstance(seed, int) or seed < 0:
        raise CompileError(f"seed = {seed!r} must be a non-negative integer")
    if not isinstance(budget, int) or budget < 1:
        raise CompileError(f"budget = {budget!r} must be a positive integer")
    if not tokens:
        raise CompileError(f"mode = {key!r} has no verified factor: there is nothing for a generation program to reproduce")
    ref = next((s for s in examples if s.family == family), None) or reference_scene(family)
    ops = _mode_ops(key, tokens, ref, family, level)
    name = program_name(key, family, level, seed)
    try:
        program = GenerationProgram.model_validate(
            {"name": name, "base": {"family": family, "params": SFT_PARAMS[family]}, "ops": ops, "seed": seed,
             "budget": budget}
        )
        program = GenerationProgram.model_validate_json(program.to_json())  # as stored: equal after a round trip
        make_scene(program, 0)  # fail here, naming the mode, rather than in the generate phase
    except ValidationError as e:
        raise CompileError(f"mode = {key!r}, level {level}: {validation_message('program', e)}") from None
    except ProgramError as e:
        raise CompileError(f"mode = {key!r}, level {level}: {family} scenes cannot carry it: {e}") from None
    return ModeProgram(key=name, mode=key, family=family, level=level, parent=parent, program=program, reason=reason)


def _child_seed(parent: ModeProgram) -> int:
    text = f"{parent.key}|{parent.program.seed}|child"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF


def child_program(
    parent: ModeProgram,
    outcome: str,
    *,
    seed: int | None = None,
    budget: int | None = None,
    max_level: int = 3,
) -> ModeProgram:
    """The next program of a lineage, chosen by the mode's learning progress (`progress.mode_status`).

    - ``solved``: a harder, wider child (level + 1: wider ranges, neighbouring regions, combined factors);
      at `max_level` the level stays (the budget allocator retires solved modes).
    - ``stuck``: an easier, narrower child (level − 1); at level 0 the same level, flagged `rediagnose`.
    - ``active``: the same level with a fresh seed (more scenes of what is being learned).

    Args:
        parent: the program to evolve.
        outcome: "active", "solved" or "stuck".
        seed: the child's seed (default: derived from the parent's key and seed).
        budget: the child's budget (default: the parent's).
        max_level: the widest level (EngineConfig.max_level).

    Raises:
        CompileError: unknown outcome or max_level out of range (or the child cannot be compiled).
    """
    if outcome not in OUTCOMES:
        raise CompileError(f"outcome = {outcome!r} must be one of {list(OUTCOMES)}")
    if not isinstance(max_level, int) or not 0 <= max_level <= MAX_LEVEL:
        raise CompileError(f"max_level = {max_level!r} must be an integer in 0..{MAX_LEVEL}")
    level, flag = min(parent.level, max_level), False
    if outcome == "solved":
        if level < max_level:
            level, why = level + 1, f"solved at level {parent.level}: wider"
        else:
            why = f"solved at the widest level {level}: the mode can retire"
    elif outcome == "stuck":
        if level > 0:
            level, why = level - 1, f"no progress at level {parent.level}: narrower"
        else:
            flag, why = True, "no progress at level 0: diagnose the mode again"
    else:
        why = f"progressing at level {level}: more of the same"
    return compile_generation_program(
        parent.mode, (), parent.family, _child_seed(parent) if seed is None else seed,
        parent.program.budget if budget is None else budget, level, parent=parent.key, reason=why,
    ).model_copy(update={"rediagnose": flag})


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


def role_template(program: StageProgram, spec: ScenarioSpec) -> tuple[RoleStage, ...]:
    """A stage program's stages with entity names replaced by their roles in `spec`."""
    return tuple(RoleStage(kind=s.kind, roles=tuple(role_of(a, spec) for a in s.args), value=s.value) for s in program.stages)


def bind_potential(template: Sequence[RoleStage], spec: ScenarioSpec) -> StageProgram:
    """A role template bound to a scene's entities (roles `alt`/`other` take the first such entity).

    Raises:
        CompileError: the scene lacks an entity of a role, or the stages do not fit its entity kinds.
    """
    from coda.shaping.program import ProgramError as StageProgramError
    from coda.shaping.program import Stage

    stages = []
    for i, st in enumerate(template):
        names = []
        for r in st.roles:
            name = entity_for_role(r, spec)
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

    Returns:
        `TrainingProgramBody.model_dump(mode="json")`.

    Raises:
        CompileError: a diagnosis of another failure mode or without an episode/scene, a negative count or
            start step, an empty program key. ModeError: a malformed mode key.
    """
    key = _mode_key(mode)
    fm, _ = parse_mode_key(key)
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
        spec = scenes[d.episode_id]
        prog = try_parse_plan(d.stage_plan, spec)
        if isinstance(prog, PlanRejected):
            rejections.append(f"diagnoses[{i}]: {prog.reason}")
            continue
        compiled[i] = prog
        votes.setdefault(role_template(prog, spec), []).append(i)
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
    "ModeProgram",
    "RoleStage",
    "TrainingProgramBody",
    "bind_potential",
    "child_program",
    "compile_generation_program",
    "compile_training_program",
    "corrective_start",
    "load_training_program",
    "neighbourhood",
    "program_name",
    "reference_scene",
    "role_template",
]
