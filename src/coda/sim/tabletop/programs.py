"""The tabletop's failure-mode generation programs (`SimBackend.mode_program`): a mode's factors as scenes.

`compile_generation_program(mode, examples, family, seed, budget, level)` builds a
`coda.scene.programs.GenerationProgram` whose base is the family's training distribution (the sft split's
base parameters) and whose operators apply the mode's factors, turned into operator calls by
`coda.sim.tabletop.factors.factor_ops`, with variation around them whose width grows with `level`:

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
`body()` is what the memory's GenerationProgram record stores; `child_program(parent, level, reason)` is the
next program of its lineage at the level CoDA's planner chose by learning progress
(`coda.engine.compile.next_level`: solved → level + 1, stuck → level − 1, or re-diagnosis at level 0).
`mode_body` is the generation body the planner stores: `{"kind": "program", "program", "mode_program"}`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coda.scene.factors import CompileError, FactorError, SceneFactor
from coda.scene.generators import validation_message
from coda.scene.programs import GenerationProgram, ProgramError, make_scene
from coda.scene.spec import FAMILIES, ScenarioSpec
from coda.scene.splits import SFT_PARAMS, split_program
from coda.sim.tabletop.factors import entity_for_role, factor_ops
from coda.sim.tabletop.tokens import check_token
from coda.sim.tabletop.widening import combined_factors, merge_placements, widen

SCHEMA_VERSION = 1
MAX_LEVEL = 6  # the widest level a program has; EngineConfig.max_level picks the run's

# Typical values of a "low" / "high" physics factor (the OOD physics split's ranges' centres).
_PHYSICS_MID = {("friction", "low"): 0.4, ("friction", "high"): 2.0, ("mass", "low"): 0.4, ("mass", "high"): 3.0}


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

    schema_version: int = SCHEMA_VERSION
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
        _check_mode(self.mode, "mode")
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


def family_scene(family: str) -> ScenarioSpec:
    """A fixed sft scene of the family, used to map roles to entity names for `factor_ops`."""
    return make_scene(split_program(family, "sft", 1, 0), 0)


def _factor(token: str, ref: ScenarioSpec, family: str, where: str) -> tuple[SceneFactor, str]:
    """The SceneFactor a token stands for in the reference scene, and the role it concerns."""
    m = re.match(r"^([a-z_]+)(?:@([a-z_]+))?(?::(.*))?$", token)
    assert m is not None  # tokens were validated by check_token
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


def _check_mode(key: str, where: str) -> tuple[str, ...]:
    """The tabletop tokens of a mode key (`failure_mode|token+token`; the failure mode's name is the
    engine's to check). Raises CompileError naming `where` and the key."""
    if not isinstance(key, str) or not key:
        raise CompileError(f"{where} = {key!r} must be a non-empty mode key string")
    _, bar, rest = key.partition("|")
    tokens = tuple(rest.split("+")) if bar else ()
    for t in tokens:
        try:
            check_token(t, f"{where} = {key!r}:")
        except FactorError as e:
            raise CompileError(str(e)) from None
    return tokens


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
    mode: Any,
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
        mode: the failure mode's key (or anything with a `key`); it must have at least one factor token.
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
        CompileError: a token that is not the tabletop's, bad family/seed/budget/level, a mode without
            factors, a factor the family cannot express, or a program that cannot make its scenes.
    """
    key = mode if isinstance(mode, str) else mode.key
    tokens = _check_mode(key, "mode")
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
    ref = next((s for s in examples if s.family == family), None) or family_scene(family)
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


def child_program(parent: ModeProgram, level: int, reason: str = "", rediagnose: bool = False, *,
                  seed: int | None = None, budget: int | None = None) -> ModeProgram:
    """The next program of a lineage at `level` (`coda.engine.compile.next_level` gives the level, its
    reason and the `rediagnose` flag from the mode's learning progress): its mode and family, a seed derived
    from the parent's key and seed unless given, the parent's budget unless given.

    Raises:
        CompileError: the child cannot be compiled.
    """
    return compile_generation_program(
        parent.mode, (), parent.family, _child_seed(parent) if seed is None else seed,
        parent.program.budget if budget is None else budget, level, parent=parent.key, reason=reason,
    ).model_copy(update={"rediagnose": rediagnose})


def mode_body(mode: str, examples: Sequence[ScenarioSpec], *, level: int, parent: Mapping[str, Any] | None,
              seed: int, count: int, reason: str, rediagnose: bool = False) -> dict[str, Any]:
    """The generation body of a mode's program (`SimBackend.mode_program`): a new program around the scenes
    it was diagnosed in, or the child of `parent` (its last program's body) at `level`."""
    if parent is None:
        if not examples:
            raise CompileError(f"mode = {mode!r}: a new mode's program needs a scene it was diagnosed in")
        mp = compile_generation_program(mode, examples, examples[0].family, seed, count, level=level, reason=reason)
    else:
        mp = child_program(ModeProgram.from_body(parent["mode_program"]), level, reason, rediagnose, seed=seed, budget=count)
    return {"kind": "program", "program": mp.program.model_dump(mode="json"), "mode_program": mp.body()}


__all__ = ["MAX_LEVEL", "ModeProgram", "child_program", "compile_generation_program", "family_scene", "mode_body",
           "program_name"]
