"""Stage programs: the typed form of a stage plan ("reach the red cube, grasp it, ...").

A `StageProgram` is plain data — a list of `{kind, args, value}` stages over the registered stage kinds —
produced by parsing a plan in words (`coda.shaping.text2potential.parse_plan`) or by validating JSON from a
language model. It is never executed as code; `coda.shaping.text2potential.StagedPotential` interprets it.

Stage kinds and their arguments (entity names of a ScenarioSpec):

| kind  | args              | value                         | done when                                          |
| ----- | ----------------- | ----------------------------- | -------------------------------------------------- |
| reach | (entity,)         | –                             | the gripper is at the object / the drawer handle   |
| grasp | (object,)         | –                             | the object is grasped                              |
| lift  | (object,)         | height in m (default 0.05)    | grasped and raised at least `value` above rest     |
| carry | (object, target)  | –                             | grasped and horizontally over the target           |
| place | (object, target)  | –                             | released inside a container / on an object / in a region |
| push  | (object, region)  | –                             | the object's centre lies in the region             |
| open  | (drawer,)         | opening fraction (default 1)  | the drawer is open to `value` (within tolerance)   |
| close | (drawer,)         | –                             | the drawer is closed (within tolerance)            |
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coda.errors import CodaError
from coda.scene.spec import ScenarioSpec, entity_kinds, format_validation_error

PROGRAM_SCHEMA_VERSION = 1

STAGE_KINDS = ("reach", "grasp", "lift", "carry", "place", "push", "open", "close")
StageKind = Literal["reach", "grasp", "lift", "carry", "place", "push", "open", "close"]

#: Default lift height (m) when a plan says "lift it" without a height.
DEFAULT_LIFT = 0.05

# Entity kinds each argument position accepts.
_ARG_KINDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "reach": (("object", "drawer", "container"),),
    "grasp": (("object",),),
    "lift": (("object",),),
    "carry": (("object",), ("container", "object", "region")),
    "place": (("object",), ("container", "object", "region")),
    "push": (("object",), ("region", "container")),
    "open": (("drawer",),),
    "close": (("drawer",),),
}


class ProgramError(CodaError, ValueError):
    """A stage program is invalid or does not fit the scene; the message names the stage and value."""


class Stage(BaseModel):
    """One stage of a plan: a kind, the entity names it acts on, and an optional amount."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: StageKind  # registered stage kind
    args: tuple[str, ...]  # entity names in the scene, in the order the table above gives
    value: float | None = None  # lift height (m) or drawer opening fraction; None = the kind's default

    @model_validator(mode="after")
    def _arity(self) -> "Stage":
        want = len(_ARG_KINDS[self.kind])
        if len(self.args) != want:
            raise ValueError(f"stage '{self.kind}' takes {want} argument(s), got {list(self.args)}")
        if self.kind == "lift" and self.value is not None and not 0 < self.value <= 0.5:
            raise ValueError(f"lift height value = {self.value} must be in (0, 0.5] m")
        if self.kind == "open" and self.value is not None and not 0 < self.value <= 1:
            raise ValueError(f"open fraction value = {self.value} must be in (0, 1]")
        if self.kind not in ("lift", "open") and self.value is not None:
            raise ValueError(f"stage '{self.kind}' takes no value, got {self.value}")
        return self

    def words(self) -> str:
        """A compact rendering, e.g. `carry(obj0, bowl0)` or `open(drawer0, 0.5)`."""
        extra = [f"{self.value:g}"] if self.value is not None else []
        return f"{self.kind}({', '.join([*self.args, *extra])})"


class StageProgram(BaseModel):
    """An ordered list of stages; the potential counts how far along it a state is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = PROGRAM_SCHEMA_VERSION
    stages: tuple[Stage, ...] = Field(min_length=1)
    source: str = ""  # the plan text it came from, if any

    def describe(self) -> str:
        """`reach(obj0) → grasp(obj0) → ...`."""
        return " → ".join(s.words() for s in self.stages)

    def check_scene(self, spec: ScenarioSpec) -> "StageProgram":
        """Check every argument names an entity of the right kind in `spec`. Returns self.

        Raises:
            ProgramError: naming the stage, the argument and what it is.
        """
        return self.check_kinds(entity_kinds(spec))

    def check_kinds(self, kinds: dict[str, str]) -> "StageProgram":
        """Check every argument names an entity of the right kind (`kinds`: entity name -> object,
        container, drawer or region). Returns self.

        Raises:
            ProgramError: naming the stage, the argument and what it is.
        """
        for i, st in enumerate(self.stages):
            for j, (name, allowed) in enumerate(zip(st.args, _ARG_KINDS[st.kind])):
                have = kinds.get(name)
                if have is None:
                    raise ProgramError(
                        f"stage {i + 1} '{st.words()}': argument {j + 1} '{name}' is not an entity of the scene "
                        f"(have {sorted(kinds)})"
                    )
                if have not in allowed:
                    raise ProgramError(
                        f"stage {i + 1} '{st.words()}': argument {j + 1} '{name}' is a {have}, expected {' or '.join(allowed)}"
                    )
        return self

    @classmethod
    def from_data(cls, data: Any, spec: ScenarioSpec | None = None) -> "StageProgram":
        """Validate a mapping (e.g. parsed model output) into a program, optionally against a scene.

        Raises:
            ProgramError: off-schema data or arguments that do not fit the scene.
        """
        if not isinstance(data, dict):
            raise ProgramError(f"stage program must be a JSON object, got {type(data).__name__}")
        try:
            prog = cls.model_validate(data)
        except ValidationError as e:
            raise ProgramError(format_validation_error("stage program", e)) from None
        return prog.check_scene(spec) if spec is not None else prog

    @classmethod
    def from_json(cls, text: str, spec: ScenarioSpec | None = None) -> "StageProgram":
        """Parse JSON text into a program (see `from_data`)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProgramError(f"stage program JSON is malformed: {e.msg} at line {e.lineno} column {e.colno}") from None
        return cls.from_data(data, spec)


def program_json_schema() -> dict[str, Any]:
    """JSON schema of a stage program as a language model should write it (stages only)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["stages"],
        "properties": {
            "stages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["kind", "args", "value"],
                    "properties": {
                        "kind": {"type": "string", "enum": list(STAGE_KINDS)},
                        "args": {"type": "array", "items": {"type": "string"}},
                        "value": {"type": ["number", "null"]},
                    },
                },
            }
        },
    }
