"""Scene factors: the axes of a scene a diagnosis can blame (pure data).

A factor names one axis of a scene (where an entity sits, the instruction's wording, which goal the layout
asks for, an entity's look, another object nearby, a physical parameter), the entity it concerns and its value
in words. Critics write them (`coda.critic.diagnosis`), the verifier tests them against the simulator and the
engine turns the verified ones into generation programs; they live here, with the scene language, so every
layer can speak of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coda.errors import CodaError

#: Scene factors a diagnosis can blame, and what `value` holds for each.
FACTOR_KINDS: dict[str, str] = {
    "position": "where an object sits; value = a region name (e.g. far_left) or 'x,y' in metres",
    "region": "which table region the task happens in; value = a region name",
    "instruction": "the wording of the instruction; value = the phrase that misled the policy",
    "task": "which object or container the instruction asks for in this layout; value = the requested target in words",
    "object_attribute": "an object's look; value = attribute=word, e.g. color=crimson, shape=cylinder, size=large",
    "distractor": "another object that drew the policy; entity = the distractor",
    "physics": "a physical parameter; value = name=number, e.g. friction_scale=0.4, mass_scale=3",
}
FactorKind = Literal["position", "region", "instruction", "task", "object_attribute", "distractor", "physics"]

MAX_DETAIL = 4000  # characters of a factor's detail


class FactorError(CodaError, ValueError):
    """A scene factor that a simulator cannot express, apply or undo; the message names the factor and why."""


class CompileError(CodaError, ValueError):
    """A failure mode cannot be compiled into a program, or a program body is invalid; the message names the
    field (raised by a simulator's `mode_program` and by the engine's compiler alike)."""


class SceneFactor(BaseModel):
    """A scene factor a diagnosis implicates (see FACTOR_KINDS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FactorKind  # which axis of the scene
    entity: str | None  # the scene entity it concerns (object/container/region name), None if scene-wide
    value: str = Field(max_length=200)  # the factor's value in words (region name, phrase, attribute=word...)
    detail: str = Field(max_length=MAX_DETAIL)  # why this factor matters, one sentence


__all__ = ["FACTOR_KINDS", "MAX_DETAIL", "CompileError", "FactorError", "FactorKind", "SceneFactor"]
