"""Generation-program operators for LIBERO: edits of a task's BDDL text, pure given the rng.

Each operator is registered with a typed argument model and maps `(rng, LiberoScenario, **args)` to a new
`LiberoScenario` whose BDDL text carries the edit and whose placements are sampled from its regions with a
seed drawn from `rng` (`init_state=None`): official initial states belong to the official BDDL only.

| operator | what it changes |
| --- | --- |
| `widen_region` | an object's initial region grows by `margin` on every side (positions vary continuously) |
| `shift_region` | an object's initial region moves by (dx, dy) drawn from ranges |
| `swap_regions` | two objects exchange initial regions |
| `paraphrase` | the `(:language ...)` instruction is reworded with CoDA's own templates and synonyms |
| `change_task` | another object of the scene becomes the one to move (goal, objects of interest, instruction) |

Held out by construction: no operator reads the LIBERO-PRO perturbation configs or suites to make a scene;
`paraphrase` only uses the PRO `_lan` instructions as a block list, so a training instruction never equals an
evaluation one. An unknown operator or a bad argument fails with the list of operators or the field named.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coda.registry import Registry
from coda.sim.libero import suites as S
from coda.sim.libero.bddl_edit import region_ranges, set_region_ranges
from coda.sim.libero.errors import LiberoError
from coda.sim.libero.scenario import LiberoScenario
from coda.sim.libero.state import category_words


class LiberoOperatorError(LiberoError):
    """An operator cannot apply to this scenario, or its arguments are invalid."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class LiberoOperator:
    name: str
    args_model: type[BaseModel]
    fn: Callable[..., str]  # (rng, text, scenario, **args) -> new BDDL text
    doc: str


OPERATORS: Registry[LiberoOperator] = Registry("LIBERO operator")


def _operator(name: str, args_model: type[BaseModel]) -> Callable[[Callable[..., str]], Callable[..., str]]:
    def deco(fn: Callable[..., str]) -> Callable[..., str]:
        OPERATORS.register(name, LiberoOperator(name, args_model, fn, (fn.__doc__ or "").strip().splitlines()[0]))
        return fn

    return deco


def apply_operator(rng: np.random.Generator, scenario: LiberoScenario, op: str,
                   args: dict[str, Any] | None = None) -> LiberoScenario:
    """Apply one registered operator. Raises RegistryError (lists the operators) or LiberoOperatorError."""
    operator = OPERATORS.get(op)
    if args is not None and not isinstance(args, dict):
        raise LiberoOperatorError(f"operator '{op}' args must be a mapping, got {type(args).__name__}")
    try:
        parsed = operator.args_model.model_validate(args or {})
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "args"
        raise LiberoOperatorError(f"operator '{op}' argument '{field}' = {err.get('input')!r}: {err['msg']}") from None
    text = operator.fn(rng, scenario.bddl_text(), scenario, **dict(parsed))
    return replace(scenario, bddl=text, init_state=None, seed=int(rng.integers(2**31)))


def derive(rng: np.random.Generator, scenario: LiberoScenario, ops: list[tuple[str, dict[str, Any]]]) -> LiberoScenario:
    """Apply operators in order."""
    for op, args in ops:
        scenario = apply_operator(rng, scenario, op, args)
    return scenario


# ---- BDDL reading ----------------------------------------------------------------------------------------


def init_regions(text: str) -> dict[str, str]:
    """Object -> the region its `(:init (On obj region))` clause places it in (full name, target prefix included)."""
    out = {}
    for clause in S.bddl_section(text, ":init"):
        if isinstance(clause, list) and len(clause) == 3 and str(clause[0]).lower() == "on":
            out[str(clause[1])] = str(clause[2])
    return out


def _region_name(text: str, placed_in: str) -> str:
    """The `(:regions ...)` entry behind an init reference like `floor_target_object_region`."""
    names = re.findall(r"\(\s*([A-Za-z0-9_]+)\s*\(\s*:target\s+([A-Za-z0-9_]+)\s*\)", text)
    for name, target in names:
        if placed_in == f"{target}_{name}":
            return name
    raise LiberoOperatorError(f"init region {placed_in!r} is not one of the BDDL's regions with ranges")


def _target(text: str) -> str:
    goal = S.bddl_goal(text)
    if not goal or len(goal[0]) < 2:
        raise LiberoOperatorError(f"goal = {goal} has no object to move")
    return str(goal[0][1])


def _object(text: str, ref: str) -> str:
    """'target' -> the goal's object; otherwise an object name of the BDDL."""
    if ref == "target":
        return _target(text)
    objects = S.bddl_objects(text)
    if ref not in objects:
        raise LiberoOperatorError(f"object {ref!r} is not in the scene; objects: {['target', *objects]}")
    return ref


def _object_region(text: str, ref: str) -> tuple[str, str]:
    name = _object(text, ref)
    placed = init_regions(text).get(name)
    if placed is None:
        raise LiberoOperatorError(f"object {name!r} has no (On {name} region) clause in (:init ...)")
    return name, _region_name(text, placed)


# ---- position ----------------------------------------------------------------------------------------------


class WidenArgs(_Args):
    object: str = "target"  # whose initial region ('target' = the goal's object)
    margin: tuple[float, float] = (0.02, 0.06)  # metres added on every side, drawn uniformly


@_operator("widen_region", WidenArgs)
def widen_region(rng: np.random.Generator, text: str, scenario: LiberoScenario, *, object: str,
                 margin: tuple[float, float]) -> str:
    """Grow an object's initial region on every side."""
    _, region = _object_region(text, object)
    m = float(rng.uniform(*sorted(margin)))
    x0, y0, x1, y1 = region_ranges(text, region)
    return set_region_ranges(text, region, (x0 - m, y0 - m, x1 + m, y1 + m))


class ShiftArgs(_Args):
    object: str = "target"
    dx: tuple[float, float] = (-0.08, 0.08)  # metres, drawn uniformly
    dy: tuple[float, float] = (-0.08, 0.08)


@_operator("shift_region", ShiftArgs)
def shift_region(rng: np.random.Generator, text: str, scenario: LiberoScenario, *, object: str,
                 dx: tuple[float, float], dy: tuple[float, float]) -> str:
    """Move an object's initial region."""
    _, region = _object_region(text, object)
    ddx, ddy = float(rng.uniform(*sorted(dx))), float(rng.uniform(*sorted(dy)))
    x0, y0, x1, y1 = region_ranges(text, region)
    return set_region_ranges(text, region, (x0 + ddx, y0 + ddy, x1 + ddx, y1 + ddy))


class SwapArgs(_Args):
    a: str = "target"
    b: str = "other"  # 'other' = a random other object placed in a region with ranges


@_operator("swap_regions", SwapArgs)
def swap_regions(rng: np.random.Generator, text: str, scenario: LiberoScenario, *, a: str, b: str) -> str:
    """Two objects exchange their initial regions."""
    name_a, _ = _object_region(text, a)
    placed = init_regions(text)
    if b == "other":
        ranged = {n for n, r in placed.items() if n != name_a and _has_ranges(text, r)}
        if not ranged:
            raise LiberoOperatorError(f"no other object of the scene sits in a region with ranges to swap with {name_a!r}")
        name_b = sorted(ranged)[int(rng.integers(len(ranged)))]
    else:
        name_b, _ = _object_region(text, b)
    if name_a == name_b:
        raise LiberoOperatorError(f"swap_regions needs two objects, got {name_a!r} twice")
    ra, rb = placed[name_a], placed[name_b]
    out = re.sub(rf"\(\s*On\s+{re.escape(name_a)}\s+{re.escape(ra)}\s*\)", f"(On {name_a} @@B@@)", text, flags=re.I)
    out = re.sub(rf"\(\s*On\s+{re.escape(name_b)}\s+{re.escape(rb)}\s*\)", f"(On {name_b} {ra})", out, flags=re.I)
    return out.replace("@@B@@", rb)


def _has_ranges(text: str, placed: str) -> bool:
    try:
        region_ranges(text, _region_name(text, placed))
        return True
    except LiberoError:
        return False


# ---- language ----------------------------------------------------------------------------------------------

_PICK = re.compile(r"^\s*pick(?: up)? the (?P<obj>.+?) and (?:place|put) it (?P<prep>in|on|into|onto) the (?P<dest>.+?)\s*$",
                   re.I)
TAKE = ("pick up", "grab", "take", "lift", "get")
PUT = ("put", "set", "place", "drop", "leave")
PREP = {"in": ("in", "into", "inside"), "on": ("on", "onto", "on top of")}
TEMPLATES = (
    "{take} the {obj} and {put} it {prep} the {dest}",
    "{put} the {obj} {prep} the {dest}",
    "{take} the {obj}, then {put} it {prep} the {dest}",
    "move the {obj} {prep} the {dest}",
)


BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


@lru_cache(maxsize=None)
def held_out_instructions(suite: str) -> frozenset[str]:
    """The (normalised) instructions of the suite's LIBERO-PRO `_lan` and `_task` variants: never generated."""
    base = next((b for b in BASE_SUITES if suite == b or suite.startswith(b + "_")), suite)
    out = set()
    for variant in ("_lan", "_task"):
        name = base + variant
        if name in S.list_suites():
            out |= {_norm(t.instruction()) for t in S.list_tasks(name)}
    return frozenset(out)


class ParaphraseArgs(_Args):
    p_synonym: float = Field(0.8, ge=0, le=1)  # chance each verb / preposition is replaced by a synonym


@_operator("paraphrase", ParaphraseArgs)
def paraphrase(rng: np.random.Generator, text: str, scenario: LiberoScenario, *, p_synonym: float) -> str:
    """Reword a pick-and-place instruction with CoDA's templates (never a LIBERO-PRO `_lan` instruction)."""
    current = S.bddl_language(text)
    m = _PICK.match(current)
    if m is None:
        raise LiberoOperatorError(f"paraphrase: instruction {current!r} is not 'pick the X and place it in/on the Y'")
    prep = "in" if m["prep"].lower() in ("in", "into") else "on"
    blocked = held_out_instructions(scenario.suite) | {_norm(current)}

    def word(options: tuple[str, ...]) -> str:
        return options[int(rng.integers(len(options)))] if rng.random() < p_synonym else options[0]

    for _ in range(32):
        template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
        new = template.format(take=word(TAKE), put=word(PUT), prep=word(PREP[prep]), obj=m["obj"], dest=m["dest"])
        if _norm(new) not in blocked:
            return _set_language(text, new)
    raise LiberoOperatorError(f"paraphrase: every rewording of {current!r} drawn was held out or unchanged")


def _set_language(text: str, new: str) -> str:
    out, n = re.subn(r"\(:language\s*(.*?)\)", lambda _: f"(:language {new})", text, count=1, flags=re.S)
    if n != 1:
        raise LiberoOperatorError("the BDDL text has no (:language ...) field")
    return out


# ---- task --------------------------------------------------------------------------------------------------


class ChangeTaskArgs(_Args):
    pass


@_operator("change_task", ChangeTaskArgs)
def change_task(rng: np.random.Generator, text: str, scenario: LiberoScenario) -> str:
    """Another object of the scene, of another category, becomes the one to move (same destination)."""
    goal = S.bddl_goal(text)
    if len(goal) != 1 or len(goal[0]) != 3:
        raise LiberoOperatorError(f"change_task: goal = {goal} is not one (In|On object destination) clause")
    rel, obj, dest = (str(x) for x in goal[0])
    objects = S.bddl_objects(text)
    dest_obj = next((n for n in objects if dest == n or dest.startswith(n + "_")), None)
    placed = init_regions(text)
    options = sorted(n for n, cat in objects.items()
                     if n not in (obj, dest_obj) and cat != objects.get(obj) and _has_ranges(text, placed.get(n, "")))
    if not options:
        raise LiberoOperatorError(f"change_task: no other object of another category than {obj!r} to move")
    new = options[int(rng.integers(len(options)))]
    m = _PICK.match(S.bddl_language(text))
    if m is None:
        raise LiberoOperatorError(f"change_task: instruction {S.bddl_language(text)!r} is not 'pick the X and place it ...'")
    out = re.sub(rf"\(\s*{rel}\s+{re.escape(obj)}\s+{re.escape(dest)}\s*\)", f"({rel} {new} {dest})", text, flags=re.I)
    interest = S.bddl_obj_of_interest(text)
    block = re.search(r"\(:obj_of_interest\s*(.*?)\)", out, flags=re.S)
    if block is not None:
        names = [new if n == obj else n for n in interest]
        out = out[: block.start(1)] + "\n    " + "\n    ".join(names) + "\n  " + out[block.end(1):]
    words = category_words(objects[new])
    return _set_language(out, f"pick the {words} and place it {m['prep']} the {m['dest']}")


__all__ = ["OPERATORS", "LiberoOperatorError", "apply_operator", "derive", "held_out_instructions", "init_regions"]
