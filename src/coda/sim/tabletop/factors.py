"""The tabletop's factor vocabulary: a scene factor as scene edits, behind the verifier's counterfactual
check (`coda.critic.verify`, check b) and the generation programs of failure modes (`coda.sim.tabletop.programs`).

An implicated factor is tested twice: `factor_ops` expresses it as scene-operator calls that apply it to
*another* scene of the family (entities named by role, `role_of`), and `undo_factor` puts it back in the
failed scene as the family's training distribution has it (`training_region`, `SFT_PARAMS`). Two position
factors whose entities sit in each other's training regions (`swapped_pairs`) are one swap, applied and
undone together.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.errors import CodaError
from coda.scene.factors import FactorError, SceneFactor
from coda.scene.spec import PALETTE, DrawerSpec, PhysicsSpec, RobotStart, ScenarioSpec, entity_kinds, entity_xy

if TYPE_CHECKING:
    from coda.sim.backends import FactorEdit


ROLES = ("target", "goal", "alt", "other")  # what `role_of` calls an entity


def role_of(name: str | None, spec: ScenarioSpec) -> str:
    """The role of an entity in a scene — target, goal, alt or other (None means the target): a reference
    that carries over to other scenes, where entity names do not."""
    g = spec.goal[0]
    if name is None or name == g.args[0]:
        return "target"
    if len(g.args) > 1 and name == g.args[1]:
        return "goal"
    goal = {a for x in spec.goal for a in x.args}
    if entity_kinds(spec).get(name) in ("container", "region") and name not in goal:
        return "alt"
    return "other"


def entity_for_role(role: str, spec: ScenarioSpec) -> str | None:
    """An entity of `spec` with that role (the first in scene order), or None when the scene has none."""
    if role not in ROLES:
        raise FactorError(f"role = {role!r} is not one of {list(ROLES)}")
    return next((n for n in entity_kinds(spec) if role_of(n, spec) == role), None)  # scene order


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def factor_ops(f: SceneFactor, spec: ScenarioSpec, tier: str = "train") -> list[dict[str, Any]]:
    """Scene-operator calls that apply one factor to *another* scene of the family (entities by role).

    Raises:
        FactorError: the factor's value cannot be expressed with the registered operators.
    """
    from coda.scene.regions import REGIONS

    ref = role_of(f.entity, spec)
    if f.kind in ("position", "region"):
        if f.value == "robot_start":
            return [{"op": "move_robot_start", "args": {}}]
        if f.value not in REGIONS:
            raise FactorError(f"factor {f.kind} value {f.value!r} is not a named region ({sorted(REGIONS)})")
        return [{"op": "place_in_region", "args": {"object": ref, "region": f.value}}]
    if f.kind == "instruction":
        return [{"op": "paraphrase", "args": {"tier": tier, "p_synonym": 1.0}}]
    if f.kind == "task":  # same layout, another goal: another target object, destination or drawer fraction
        return [{"op": "change_task", "args": {"change": "any"}}]
    if f.kind == "distractor":
        return [{"op": "add_distractors", "args": {"n": 1, "kind": "lookalike", "region": "near_target"}}]
    if f.kind == "object_attribute":
        attr, _, val = f.value.partition("=")
        attr, val = attr.strip().lower(), val.strip().lower()
        if attr in ("color", "colour"):
            return [{"op": "recolor", "args": {"object": ref, "colors": [val] if val in PALETTE else None}}]
        if attr == "size":
            scale = {"large": (1.15, 1.4), "small": (0.7, 0.9)}.get(val, (0.7, 1.4))
            return [{"op": "resize", "args": {"object": ref, "scale": scale}}]
        if attr == "shape":
            shapes = [val] if val in ("box", "cylinder", "sphere") else ["box", "cylinder", "sphere"]
            return [{"op": "reshape", "args": {"object": ref, "shapes": shapes}}]
        raise FactorError(f"factor object_attribute value {f.value!r}: attribute must be color, size or shape")
    # physics
    name, _, num = f.value.partition("=")
    v = _num(num.strip())
    key = name.strip().lower().removesuffix("_scale")
    if key in ("friction", "mass"):
        rng = (v * 0.9, v * 1.1) if v and v > 0 else ({"friction": (0.3, 0.5), "mass": (2.0, 4.0)}[key])
        return [{"op": "scale_physics", "args": {key: rng}}]
    if key == "damping":
        return [{"op": "scale_physics", "args": {"damping": (2.0, 4.0)}}]
    raise FactorError(f"factor physics value {f.value!r}: expected friction_scale=x, mass_scale=x or damping")


def factor_edits(factors: Sequence[SceneFactor], spec: ScenarioSpec, tier: str = "train") -> list["FactorEdit"]:
    """Each implicated factor of the failed scene `spec` as one `FactorEdit`: applied to another scene of the
    family by the operator calls of `factor_ops` (entities by role), undone by `undo_factor`; a swapped pair
    (`swapped_pairs`) is one edit, `swap_positions` of the two roles applied and the pair swapped back (one
    variant).

    Raises:
        FactorError: `spec` is not a tabletop scene.
    """
    from coda.sim.backends import FactorEdit

    if not isinstance(spec, ScenarioSpec):
        raise FactorError(f"factor edits: the scene is a {type(spec).__name__}, not a tabletop ScenarioSpec")
    pairs = swapped_pairs(factors, spec)
    edits: list[FactorEdit] = []
    for i, f in enumerate(factors):
        j = pairs.get(i)
        if j is not None and j < i:
            continue  # tested with its partner
        if j is not None:
            a, b = f.entity, factors[j].entity
            ops: tuple[dict[str, Any], ...] = (
                {"op": "swap_positions", "args": {"a": role_of(a, spec), "b": role_of(b, spec)}},)
            edits.append(FactorEdit(indices=(i, j), apply=partial(_apply, ops), ops=ops, undo_variants=1,
                                    undo=partial(_swap_back, spec, a, b)))
            continue
        try:
            ops, error = tuple(factor_ops(f, spec, tier)), ""
        except FactorError as e:
            ops, error = (), str(e)
        edits.append(FactorEdit(indices=(i,), apply=partial(_apply, ops) if ops else None, ops=ops, error=error,
                                undo=partial(_undo_one, f, spec)))
    return edits


def _apply(ops: Sequence[dict[str, Any]], base: ScenarioSpec, rng: np.random.Generator) -> ScenarioSpec:
    from coda.scene.operators import derive

    return derive(rng, base, [(o["op"], o["args"]) for o in ops])


def _undo_one(f: SceneFactor, spec: ScenarioSpec, rng: np.random.Generator) -> ScenarioSpec:
    return undo_factor(rng, f, spec)


def _swap_back(spec: ScenarioSpec, a: str | None, b: str | None, rng: np.random.Generator) -> ScenarioSpec:
    from coda.scene.operators import derive

    return derive(rng, spec, [("swap_positions", {"a": a, "b": b})])


def training_region(name: str, spec: ScenarioSpec) -> str | None:
    """The named region where the family's training distribution (`SFT_PARAMS`) puts an entity's role."""
    from coda.scene.splits import SFT_PARAMS

    params = SFT_PARAMS.get(spec.family, {})
    role = role_of(name, spec)
    objects = {o.name for o in spec.objects}
    key = "goal_region" if (role == "target" and name not in objects) else {
        "target": "target_region", "goal": "goal_region", "alt": "alt_region", "other": "others_region"}[role]
    return params.get(key)


def swapped_pairs(factors: Sequence[SceneFactor], spec: ScenarioSpec) -> dict[int, int]:
    """Position factors (index -> partner index) whose entities sit in each other's training regions: a
    swapped layout, which is applied and undone as one swap (moving either entity alone would collide)."""
    from coda.scene.regions import REGIONS

    names = entity_kinds(spec)
    pos = [i for i, f in enumerate(factors)
           if f.kind in ("position", "region") and f.value != "robot_start" and f.entity in names]
    pairs: dict[int, int] = {}
    for i in pos:
        for j in pos:
            a, b = factors[i].entity, factors[j].entity
            if i >= j or i in pairs or j in pairs or a == b or role_of(a, spec) == role_of(b, spec):
                continue
            ra, rb = training_region(a, spec), training_region(b, spec)  # type: ignore[arg-type]
            if (ra in REGIONS and rb in REGIONS and REGIONS[ra].contains(*entity_xy(spec, b), tol=0.005)
                    and REGIONS[rb].contains(*entity_xy(spec, a), tol=0.005)):
                pairs[i], pairs[j] = j, i
    return pairs


def undo_factor(rng: np.random.Generator, f: SceneFactor, spec: ScenarioSpec) -> ScenarioSpec:
    """`spec` with one factor put back as the family's training distribution (`SFT_PARAMS`) has it.

    position -> the entity (default: the target) re-placed in its role's training region; robot_start ->
    the default start pose; instruction -> the canonical instruction; distractor -> the named non-goal
    object removed, else the non-goal objects beyond the training count, those most like the target (same
    colour, same shape, outside the training region of other objects) first; object_attribute -> a training colour, the training size range
    (target) or a box; physics -> nominal friction, mass and drawer damping. A factor already as in
    training (the entity inside its training region, a training colour...) comes back unchanged: undoing it
    cannot be what would fix the failure.

    Raises:
        FactorError: the factor has no undo here (a task factor, an unknown entity, an edit that does not fit).
    """
    from coda.scene.language import canonical_instruction

    if f.kind in ("position", "region"):
        return _undo_position(rng, f, spec)
    if f.kind == "instruction":
        return spec.replace(instruction=canonical_instruction(spec))
    if f.kind == "task":
        raise FactorError("a task factor has no undo: the goal is what the episode asked for")
    if f.kind == "distractor":
        return _undo_distractor(f, spec)
    if f.kind == "object_attribute":
        return _undo_attribute(rng, f, spec)
    damping = DrawerSpec.model_fields["damping"].default
    return _edited(f, spec, physics=PhysicsSpec().model_dump(),
                   drawers=[d.model_copy(update={"damping": damping}).model_dump() for d in spec.drawers])


def _derived(rng: np.random.Generator, f: SceneFactor, spec: ScenarioSpec,
             *calls: tuple[str, dict[str, Any]]) -> ScenarioSpec:
    """`spec` edited by scene-operator `calls` that undo `f`; FactorError if the edit does not fit."""
    from coda.scene.operators import derive

    try:
        return derive(rng, spec, list(calls))
    except CodaError as e:
        raise FactorError(f"cannot undo {f.kind}={f.value!r}: {str(e).splitlines()[0]}") from None


def _edited(f: SceneFactor, spec: ScenarioSpec, **changes: Any) -> ScenarioSpec:
    """`spec` with fields replaced to undo `f`; FactorError if the result is not a valid layout."""
    from coda.scene.layout import problems

    out = spec.replace(**changes)
    found = problems(out)
    if found:
        raise FactorError(f"cannot undo {f.kind}={f.value!r}: {found[0]}")
    return out


def _undo_position(rng: np.random.Generator, f: SceneFactor, spec: ScenarioSpec) -> ScenarioSpec:
    """A position factor undone: the robot's default start, or the entity back in its training region."""
    from coda.scene.regions import REGIONS

    if f.value == "robot_start":
        return _edited(f, spec, robot=RobotStart().model_dump())
    name = f.entity or spec.goal[0].args[0]
    if name not in entity_kinds(spec):
        raise FactorError(f"cannot undo {f.kind}={f.value!r}: no entity '{name}' in the scene")
    region = training_region(name, spec)
    if region is None:
        raise FactorError(f"cannot undo {f.kind}={f.value!r}: family '{spec.family}' has no training region "
                          f"for the {role_of(name, spec)} '{name}'")
    if REGIONS[region].contains(*entity_xy(spec, name), tol=0.005):
        return spec  # already where training puts it
    return _derived(rng, f, spec, ("place_in_region", {"object": name, "region": region}))


def _undo_distractor(f: SceneFactor, spec: ScenarioSpec) -> ScenarioSpec:
    """A distractor factor undone: the named non-goal object, else the most target-like excess ones, removed."""
    from coda.scene.operators import goal_names
    from coda.scene.regions import REGIONS
    from coda.scene.splits import SFT_PARAMS

    params = SFT_PARAMS.get(spec.family, {})
    in_goal = set(goal_names(spec))
    others = [o for o in spec.objects if o.name not in in_goal]
    excess = len(others) - int(params.get("n_others", (1, 3))[1])
    if excess <= 0:
        return spec  # no more non-goal objects than in training
    if f.entity in {o.name for o in others}:
        drop = {f.entity}
    else:  # the objects beyond the training count, the most target-like first
        t = {o.name: o for o in spec.objects}.get(spec.goal[0].args[0])
        home = REGIONS.get(str(params.get("others_region", "table")))

        def alike(o: Any) -> tuple[int, int, int]:
            return (int(t is not None and o.color == t.color), int(t is not None and o.shape == t.shape),
                    int(home is not None and not home.contains(*o.pos)))

        drop = {o.name for o in sorted(others, key=alike, reverse=True)[:excess]}
    return _edited(f, spec, objects=[o.model_dump() for o in spec.objects if o.name not in drop])


def _undo_attribute(rng: np.random.Generator, f: SceneFactor, spec: ScenarioSpec) -> ScenarioSpec:
    """An object_attribute factor undone: a training colour, the target's training size range, or a box."""
    from coda.scene.splits import SFT_COLORS, SFT_FIXTURES, SFT_PARAMS

    params = SFT_PARAMS.get(spec.family, {})
    target = spec.goal[0].args[0]
    objects = {o.name: o for o in spec.objects}
    name = f.entity or target
    attr = f.value.partition("=")[0].strip().lower()
    if attr in ("color", "colour"):
        colors = list(SFT_COLORS if name in objects else SFT_FIXTURES)
        if name in entity_kinds(spec) and getattr(spec.entity(name), "color", None) in colors:
            return spec
        return _derived(rng, f, spec, ("recolor", {"object": name, "colors": colors}))
    if attr == "size" and name == target and name in objects:
        lo, hi = params.get("target_half", (0.02, 0.025))
        if lo - 1e-6 <= min(objects[name].size[:2]) <= hi + 1e-6:
            return spec
        return _derived(rng, f, spec, ("resize", {"object": name, "half": [lo, hi]}))
    if attr == "shape" and name in objects:
        if objects[name].shape == "box":
            return spec
        return _derived(rng, f, spec, ("reshape", {"object": name, "shapes": ["box"]}))
    raise FactorError(f"cannot undo object_attribute {f.value!r} of '{name}'")


__all__ = ["ROLES", "entity_for_role", "factor_edits", "factor_ops", "role_of", "swapped_pairs", "training_region", "undo_factor"]
