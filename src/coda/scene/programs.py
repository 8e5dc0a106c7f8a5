"""Generation programs: declarative, seeded scene recipes (data, never code).

A `GenerationProgram` names a base selector (a family's generator with parameters, a named split's
program, or a list of given scenes), a list of registered operators with arguments, a seed and a budget.
`run_program(program)` returns `budget` scenes and is pure given the program: scene `i` is made from
`numpy.random.default_rng([seed, i, attempt])`, where `attempt` counts redraws after a layout that could
not be completed (a crowded region, an infeasible edit) — so the same program always gives the same scenes.

Example (JSON)::

    {"name": "far-left-lookalike", "seed": 7, "budget": 50,
     "base": {"family": "pick_place", "split": "sft"},
     "ops": [{"op": "place_in_region", "args": {"object": "target", "region": "far_left"}},
             {"op": "add_distractors", "args": {"kind": "lookalike", "region": "near_target"}}]}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coda.errors import CodaError
from coda.scene.generators import GeneratorError, parse_params, sample_base, validation_message
from coda.scene.operators import OpCall, OperatorError, apply_operator
from coda.scene.regions import PlacementError
from coda.scene.spec import Family, ScenarioSpec


class ProgramError(CodaError, ValueError):
    """A generation program is malformed or cannot produce its scenes; the message says which field or scene."""


class BaseSelector(BaseModel):
    """Where a program's base scenes come from: exactly one of `params` (default), `split` or `scenes`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: Family  # task family of the base scenes
    params: dict[str, Any] | None = None  # BaseParams fields for the family generator (None = defaults)
    split: str | None = None  # or: make each base scene with this split's program (e.g. "sft")
    scenes: tuple[ScenarioSpec, ...] | None = None  # or: edit these scenes, scene i = scenes[i % len(scenes)]

    @model_validator(mode="after")
    def _one_source(self) -> "BaseSelector":
        given = [k for k in ("params", "split", "scenes") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of params, split, scenes (got {given})")
        if self.params is not None:
            parse_params(self.params)
        if self.split is not None:
            from coda.scene.splits import SPLITS

            if self.split not in SPLITS:
                raise ValueError(f"unknown split '{self.split}'. Available: {list(SPLITS)}")
        if self.scenes is not None:
            if not self.scenes:
                raise ValueError("scenes must not be empty")
            wrong = sorted({s.family for s in self.scenes if s.family != self.family})
            if wrong:
                raise ValueError(f"scenes of families {wrong} do not match family '{self.family}'")
        return self


class GenerationProgram(BaseModel):
    """A seeded, declarative recipe for `budget` scenes: base selector + operators."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.:/@-]+$", max_length=120)  # recorded in every scene's provenance
    base: BaseSelector  # where base scenes come from
    ops: tuple[OpCall, ...] = ()  # operators applied in order to every base scene
    seed: int = Field(0, ge=0)  # the program's only source of randomness
    budget: int = Field(1, ge=1, le=1_000_000)  # number of scenes to make
    max_attempts: int = Field(20, ge=1, le=1000)  # redraws per scene before the program fails

    @field_validator("ops", mode="before")
    @classmethod
    def _calls(cls, v: Any) -> Any:
        return [OpCall(op=c[0], args=c[1]) if isinstance(c, (list, tuple)) else c for c in v] if isinstance(v, (list, tuple)) else v

    @property
    def program_id(self) -> str:
        """Content hash (16 hex chars) of the canonical JSON."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def load_program(data: str | bytes | dict[str, Any]) -> GenerationProgram:
    """Parse and validate a program from JSON text or a dict. Raises ProgramError naming the field."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise ProgramError(f"program JSON is malformed: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict):
        raise ProgramError(f"program must be a JSON object, got {type(data).__name__}")
    try:
        return GenerationProgram.model_validate(data)
    except ValidationError as e:
        raise ProgramError(validation_message("program", e)) from None


_RETRYABLE = (PlacementError, OperatorError, GeneratorError)


def _base_scene(program: GenerationProgram, rng: np.random.Generator, i: int) -> ScenarioSpec:
    base = program.base
    if base.scenes is not None:
        return base.scenes[i % len(base.scenes)]
    if base.split is not None:
        from coda.scene.splits import split_program

        spec = _make(split_program(base.family, base.split, n=1, seed=0), rng, i)
        # tagged like make_split tags it, so `parent` is the spec_id the split file lists
        return spec.replace(provenance=spec.provenance.model_copy(update={"split": base.split}))
    return sample_base(base.family, rng, base.params)


def _make_pair(program: GenerationProgram, rng: np.random.Generator, i: int) -> tuple[ScenarioSpec, ScenarioSpec]:
    base = spec = _base_scene(program, rng, i)
    for call in program.ops:
        spec = apply_operator(rng, spec, call.op, call.args)
    prov = spec.provenance.model_copy(
        update={"program": program.name, "parent": base.spec_id if program.ops else spec.provenance.parent}
    )
    return spec.replace(provenance=prov), base


def _make(program: GenerationProgram, rng: np.random.Generator, i: int) -> ScenarioSpec:
    return _make_pair(program, rng, i)[0]


def scene_with_base(program: GenerationProgram, i: int) -> tuple[ScenarioSpec, ScenarioSpec]:
    """Scene `i` of a program and the base scene its operators were applied to (the scene itself when the
    program has no operators): with a split as base, the paired scene without the program's edits.

    Raises:
        ProgramError: every one of `max_attempts` draws failed; the message carries the last reason.
    """
    last: Exception | None = None
    for attempt in range(program.max_attempts):
        rng = np.random.default_rng([program.seed, i, attempt])
        try:
            return _make_pair(program, rng, i)
        except _RETRYABLE as e:
            last = e
    raise ProgramError(
        f"program '{program.name}': scene {i} failed all {program.max_attempts} attempts; last error: {last}"
    )


def make_scene(program: GenerationProgram, i: int) -> ScenarioSpec:
    """Scene `i` of a program (the same scene `run_program` returns at index i).

    Raises:
        ProgramError: every one of `max_attempts` draws failed; the message carries the last reason.
    """
    return scene_with_base(program, i)[0]


def iter_program(program: GenerationProgram, start: int = 0) -> Iterator[ScenarioSpec]:
    """Scenes start, start+1, ... of a program, without end (budget is not applied)."""
    i = start
    while True:
        yield make_scene(program, i)
        i += 1


def run_program(program: GenerationProgram | dict[str, Any]) -> list[ScenarioSpec]:
    """Run a generation program: `budget` scenes, pure given the program (same seed -> same scenes).

    Args:
        program: a GenerationProgram or its dict form (validated).

    Returns:
        The scenes, each with provenance.program = program.name and parent = its base scene's spec_id.

    Raises:
        ProgramError: malformed program (names the field) or a scene that cannot be made.
    """
    if not isinstance(program, GenerationProgram):
        program = load_program(program)
    return [make_scene(program, i) for i in range(program.budget)]
