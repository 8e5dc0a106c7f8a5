"""The scene-operator registry and what operators share: entity references and the edits that record them.

`coda.scene.operators` registers the operators (importing it fills `OPERATORS`) and documents references and
provenance; this module holds the registry, the `operator` decorator, the argument models' base and the
helpers every operator uses to resolve a reference, edit an entity and record the edit in the provenance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from coda.errors import CodaError
from coda.registry import Registry
from coda.scene.language import canonical_instruction
from coda.scene.layout import problems
from coda.scene.spec import RegionSpec, ScenarioSpec


class OperatorError(CodaError, ValueError):
    """An operator cannot apply to a scene or got bad arguments; the message says which and why."""


@dataclass(frozen=True)
class Operator:
    """A registered scene edit: its name, argument model, implementation and the factor family it varies."""

    name: str
    args_model: type[BaseModel]
    fn: Callable[..., ScenarioSpec]
    doc: str


OPERATORS: Registry[Operator] = Registry("operator")


class OperatorArgs(BaseModel):
    """Base of every operator's argument model: frozen, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def operator(name: str, args_model: type[BaseModel]) -> Callable[[Callable[..., ScenarioSpec]], Callable[..., ScenarioSpec]]:
    """Register `fn(rng, spec, **args)` under `name` with its argument model."""

    def deco(fn: Callable[..., ScenarioSpec]) -> Callable[..., ScenarioSpec]:
        OPERATORS.register(name, Operator(name, args_model, fn, (fn.__doc__ or "").strip().splitlines()[0]))
        return fn

    return deco


# ---- references and edits ------------------------------------------------------------------------

REFS = ("target", "goal", "alt", "other", "any")


def goal_names(spec: ScenarioSpec) -> list[str]:
    """Entity names the goal mentions, in order."""
    return [a for g in spec.goal for a in g.args]


def resolve(rng: np.random.Generator, spec: ScenarioSpec, ref: str) -> str:
    """The entity name a reference denotes (random choices use `rng`). Raises OperatorError if none fits."""
    in_goal = set(goal_names(spec))
    g = spec.goal[0]
    if ref == "target":
        return g.args[0]
    if ref == "goal":
        if len(g.args) < 2:
            raise OperatorError(f"reference 'goal': goal {g.name}{tuple(g.args)} has no destination")
        return g.args[1]
    pools = {
        "alt": [e.name for e in (*spec.containers, *spec.regions) if e.name not in in_goal],
        "other": [o.name for o in spec.objects if o.name not in in_goal],
        "any": [o.name for o in spec.objects],
    }
    if ref in pools:
        if not pools[ref]:
            raise OperatorError(f"reference '{ref}': no such entity in this {spec.family} scene")
        return pools[ref][int(rng.integers(len(pools[ref])))]
    names = [e.name for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)]
    if ref not in names:
        raise OperatorError(f"unknown entity reference '{ref}'. Available: {list(REFS) + names}")
    return ref


def record(spec: ScenarioSpec, op_text: str, factors: list[str]) -> ScenarioSpec:
    """`spec` with an operator's text appended to `provenance.operators` and its new factors to `provenance.factors`."""
    prov = spec.provenance
    merged = list(prov.factors) + [f for f in factors if f not in prov.factors]
    return spec.replace(provenance=prov.model_copy(update={"operators": (*prov.operators, op_text), "factors": tuple(merged)}))


def retell(op: str, old: ScenarioSpec, new: ScenarioSpec) -> ScenarioSpec:
    """`new` with its instruction kept true to the scene (see `coda.scene.operators`): rewritten canonically
    when the canonical words changed; raises OperatorError when `old` had been paraphrased already."""
    before, after = canonical_instruction(old), canonical_instruction(new)
    if before == after:
        return new
    if old.instruction != before:
        raise OperatorError(
            f"'{op}' changes the words of an instruction that was already paraphrased; apply 'paraphrase' after '{op}'"
        )
    return new.replace(instruction=after)


def check_feasible(op: str, spec: ScenarioSpec) -> ScenarioSpec:
    """`spec` unchanged if it is feasible; raises OperatorError naming `op` and the first problem otherwise."""
    found = problems(spec)
    if found:
        raise OperatorError(f"'{op}' made an infeasible scene: {found[0]}")
    return spec


def with_entity(spec: ScenarioSpec, name: str, **changes: Any) -> ScenarioSpec:
    """`spec` with the fields `changes` of entity `name` replaced."""

    def edit(group: tuple) -> list:
        return [e.model_copy(update=changes) if e.name == name else e for e in group]

    return spec.replace(
        objects=edit(spec.objects), containers=edit(spec.containers), drawers=edit(spec.drawers), regions=edit(spec.regions)
    )


def entity_pos(e: Any) -> tuple[float, float]:
    """An entity's table position: a region's centre, else its `pos`."""
    return tuple(e.center) if isinstance(e, RegionSpec) else tuple(e.pos)  # type: ignore[return-value]


def set_pos(spec: ScenarioSpec, name: str, pos: tuple[float, float]) -> ScenarioSpec:
    """`spec` with entity `name` moved to `pos` (rounded to 0.1 mm)."""
    key = "center" if isinstance(spec.entity(name), RegionSpec) else "pos"
    return with_entity(spec, name, **{key: (round(pos[0], 4), round(pos[1], 4))})


def choose(rng: np.random.Generator, options: list[Any]) -> Any:
    """One of `options`, drawn uniformly with `rng`."""
    return options[int(rng.integers(len(options)))]


def uniform(rng: np.random.Generator, r: tuple[float, float]) -> float:
    """A uniform draw from the range `r`, rounded to 4 decimals."""
    return round(float(rng.uniform(r[0], r[1])), 4)


def ordered_range(v: tuple[float, float]) -> tuple[float, float]:
    """`v` if it is a (low, high) range with low <= high; raises ValueError otherwise (for argument validators)."""
    if v[0] > v[1]:
        raise ValueError(f"range {tuple(v)} must be (low, high) with low <= high")
    return v


Ref = str  # a reference (see REFS) or an entity name


__all__ = [
    "OPERATORS",
    "REFS",
    "Operator",
    "OperatorArgs",
    "OperatorError",
    "Ref",
    "check_feasible",
    "choose",
    "entity_pos",
    "goal_names",
    "operator",
    "ordered_range",
    "record",
    "resolve",
    "retell",
    "set_pos",
    "uniform",
    "with_entity",
]
