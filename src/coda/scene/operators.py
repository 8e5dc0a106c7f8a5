"""Scene operators: registered, typed edits `(rng, spec, **args) -> ScenarioSpec`, pure given the rng.

Each operator has a pydantic args model (unknown or ill-typed arguments are errors naming the field), records
itself in `provenance.operators` (e.g. ``place_in_region:obj0->far_left``) and the scene factors it varies in
`provenance.factors` (e.g. ``position:obj0``, ``instruction``, ``object:obj0:color``, ``distractor``,
``physics:friction``, ``task``, ``robot_start``).

Entities are referred to role-free scenes through *references*: ``target`` (the first goal argument: the
object to move, or the drawer), ``goal`` (the second goal argument: container, bottom box or region),
``alt`` (a container or region not in the goal), ``other`` (an object not in the goal), ``any`` (any object),
or an entity's name.

When an edit changes the words of the canonical instruction (a goal object recoloured, another target), the
instruction is rewritten canonically; if it had been paraphrased already, the operator refuses rather than
silently dropping the paraphrase — put ``paraphrase`` last.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coda.scene.generators import GRASP_HALF, PUSH_HALF, validation_message
from coda.scene.language import (
    DRAWER_FRACTIONS,
    DRAWER_TOL,
    container_key,
    fraction_word,
    object_key,
    paraphrase,
)
from coda.scene.layout import problems
from coda.scene.operator_base import (
    OPERATORS,
    Operator,
    OperatorArgs,
    OperatorError,
    Ref,
    check_feasible,
    choose,
    entity_pos,
    goal_names,
    operator,
    ordered_range,
    record,
    resolve,
    retell,
    set_pos,
    uniform,
    with_entity,
)
from coda.scene.regions import REGIONS, PlacementError, Rect, footprint, inside_table
from coda.scene.spec import (
    PALETTE,
    ContainerSpec,
    DrawerSpec,
    GoalPredicate,
    ObjectShape,
    ObjectSpec,
    RegionSpec,
    ScenarioSpec,
)


def parse_args(op: str, args: dict[str, Any] | None) -> BaseModel:
    """Validate an operator's arguments. Raises RegistryError (lists operators) or OperatorError (names the field)."""
    model = OPERATORS.get(op).args_model
    if args is not None and not isinstance(args, dict):
        raise OperatorError(f"operator '{op}' args must be a mapping, got {type(args).__name__}")
    try:
        return model.model_validate(args or {})
    except ValidationError as e:
        raise OperatorError(validation_message(f"operator '{op}'", e)) from None


def apply_operator(rng: np.random.Generator, spec: ScenarioSpec, op: str, args: dict[str, Any] | BaseModel | None = None) -> ScenarioSpec:
    """Apply one registered operator. `args` may be a dict (validated) or the op's parsed args model."""
    parsed = args if isinstance(args, BaseModel) else parse_args(op, args)
    return OPERATORS.get(op).fn(rng, spec, **dict(parsed))


def derive(rng: np.random.Generator, spec: ScenarioSpec, ops: list[tuple[str, dict[str, Any]]]) -> ScenarioSpec:
    """Apply operators in order; the result's provenance.parent is the input scene's spec_id."""
    parent = spec.spec_id
    for op, args in ops:
        spec = apply_operator(rng, spec, op, args)
    prov = spec.provenance.model_copy(update={"parent": parent})
    return spec.replace(provenance=prov)


# ---- position -------------------------------------------------------------------------------------


class Placement(OperatorArgs):
    object: Ref = "target"  # the entity to move (object, container, region or drawer)
    region: str | list[str]  # a region name, or a list to draw one from

    @field_validator("region")
    @classmethod
    def _known(cls, v: str | list[str]) -> str | list[str]:
        names = [v] if isinstance(v, str) else v
        bad = [n for n in names if n not in REGIONS and n != "near_target"]
        if bad or not names:
            raise ValueError(f"unknown region {bad or names}. Available: {sorted(REGIONS) + ['near_target']}")
        return v


class PlaceArgs(Placement):
    clearance: float = Field(0.03, ge=0, le=0.1)  # gap to other footprints, metres
    tries: int = Field(500, ge=1)  # placement draws before PlacementError


def _near_target(spec: ScenarioSpec) -> Rect:
    x, y = entity_pos(spec.entity(spec.goal[0].args[0]))
    return Rect(x - 0.12, x + 0.12, y - 0.12, y + 0.12)


def _place(rng: np.random.Generator, spec: ScenarioSpec, name: str, region_name: str, clearance: float, tries: int) -> ScenarioSpec:
    """Move `name` to a random free position of a region such that the whole scene stays feasible."""
    return _place_all(rng, spec, [name], [region_name], clearance, tries)


def _place_all(rng: np.random.Generator, spec: ScenarioSpec, names: list[str], regions: list[str], clearance: float,
               tries: int) -> ScenarioSpec:
    """Move each of `names` to a random free position of its region, all in one draw per try, such that the
    whole scene stays feasible; where the moved entities stood does not count."""
    static = [footprint(e) for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)
              if e.name not in names]
    at_origin = [footprint(spec.entity(n), (0.0, 0.0)) for n in names]
    for _ in range(tries):
        cand, placed = spec, []
        for name, reg, fp0 in zip(names, regions, at_origin):
            rect = _near_target(cand) if reg == "near_target" else REGIONS[reg]
            x, y = rect.sample(rng)
            fp = fp0.moved(fp0.cx + x, fp0.cy + y)
            if not inside_table(fp) or any(fp.conflicts(o, clearance) for o in (*static, *placed)):
                break
            placed.append(fp)
            cand = set_pos(cand, name, (x, y))
        else:
            if not problems(cand):
                return cand
    if len(names) == 1:
        raise PlacementError(f"cannot place '{names[0]}' in region '{regions[0]}' after {tries} tries")
    raise PlacementError(f"cannot place {names} in regions {regions} together after {tries} tries")


@operator("place_in_region", PlaceArgs)
def place_in_region(rng: np.random.Generator, spec: ScenarioSpec, *, object: Ref, region: str | list[str], clearance: float, tries: int) -> ScenarioSpec:
    """Move an entity to a random free position inside a named region (or one of several)."""
    name = resolve(rng, spec, object)
    reg = region if isinstance(region, str) else choose(rng, list(region))
    out = _place(rng, spec, name, reg, clearance, tries)
    return record(out, f"place_in_region:{name}->{reg}", [f"position:{name}"])


class PlaceTogetherArgs(OperatorArgs):
    places: list[Placement] = Field(min_length=2)  # the entities to move, each to its region
    clearance: float = Field(0.03, ge=0, le=0.1)  # gap to other footprints, metres
    tries: int = Field(500, ge=1)  # draws of all the positions at once before PlacementError


@operator("place_together", PlaceTogetherArgs)
def place_together(rng: np.random.Generator, spec: ScenarioSpec, *, places: list[Placement], clearance: float,
                   tries: int) -> ScenarioSpec:
    """Move several entities at once, each to a random free position inside its region: where the moved
    entities stood does not count, so two of them can trade areas (one `place_in_region` after another
    cannot move a target onto the goal region's spot while the goal still lies there)."""
    names = [resolve(rng, spec, p.object) for p in places]
    if len(set(names)) < len(names):
        raise OperatorError(f"place_together moves each entity once, got {names}")
    regions = [p.region if isinstance(p.region, str) else choose(rng, list(p.region)) for p in places]
    out = _place_all(rng, spec, names, regions, clearance, tries)
    text = ",".join(f"{n}->{r}" for n, r in zip(names, regions))
    return record(out, f"place_together:{text}", [f"position:{n}" for n in names])


class SwapArgs(OperatorArgs):
    a: Ref = "target"  # first entity
    b: Ref = "other"  # second entity


@operator("swap_positions", SwapArgs)
def swap_positions(rng: np.random.Generator, spec: ScenarioSpec, *, a: Ref, b: Ref) -> ScenarioSpec:
    """Exchange the positions of two entities (objects, containers or regions)."""
    na, nb = resolve(rng, spec, a), resolve(rng, spec, b)
    if na == nb:
        raise OperatorError(f"swap_positions needs two different entities, got '{na}' twice")
    ea, eb = spec.entity(na), spec.entity(nb)
    if isinstance(ea, DrawerSpec) or isinstance(eb, DrawerSpec):
        raise OperatorError("swap_positions cannot move a drawer cabinet; use place_in_region")
    out = set_pos(set_pos(spec, na, entity_pos(eb)), nb, entity_pos(ea))
    out = check_feasible("swap_positions", out)
    return record(out, f"swap_positions:{na}<->{nb}", [f"position:{na}", f"position:{nb}"])


class RobotStartArgs(OperatorArgs):
    dx: tuple[float, float] = (-0.03, 0.08)  # range of the x offset added to the start position, metres
    dy: tuple[float, float] = (-0.15, 0.15)  # range of the y offset, metres
    dz: tuple[float, float] = (-0.05, 0.05)  # range of the z offset, metres
    dyaw: tuple[float, float] = (0.0, 0.0)  # range of the yaw offset, radians

    @field_validator("dx", "dy", "dz", "dyaw")
    @classmethod
    def _ok(cls, v: tuple[float, float]) -> tuple[float, float]:
        return ordered_range(v)


@operator("move_robot_start", RobotStartArgs)
def move_robot_start(rng: np.random.Generator, spec: ScenarioSpec, *, dx: tuple, dy: tuple, dz: tuple, dyaw: tuple) -> ScenarioSpec:
    """Offset the gripper's start pose (kept above the table inside the workspace)."""
    x, y, z = spec.robot.pos
    nx = min(max(x + uniform(rng, dx), -0.28), 0.1)
    ny = min(max(y + uniform(rng, dy), -0.25), 0.25)
    nz = min(max(z + uniform(rng, dz), 0.12), 0.4)
    robot = spec.robot.model_copy(update={"pos": (round(nx, 4), round(ny, 4), round(nz, 4)), "yaw": round(spec.robot.yaw + uniform(rng, dyaw), 4)})
    out = spec.replace(robot=robot)
    return record(out, f"move_robot_start:({nx:.3f},{ny:.3f},{nz:.3f})", ["robot_start"])


# ---- language and task ----------------------------------------------------------------------------


class ParaphraseArgs(OperatorArgs):
    tier: Literal["train", "heldout"] = "train"  # vocabulary tier (heldout is reserved for evaluation)
    reorder: bool | None = None  # destination clause first (True), verb first (False), either (None)
    p_synonym: float = Field(0.7, ge=0, le=1)  # chance each describable word becomes a synonym


@operator("paraphrase", ParaphraseArgs)
def paraphrase_op(rng: np.random.Generator, spec: ScenarioSpec, *, tier: str, reorder: bool | None, p_synonym: float) -> ScenarioSpec:
    """Rewrite the instruction with another template and synonyms of a vocabulary tier; the goal is kept."""
    text = paraphrase(spec, rng, tier, reorder=reorder, p_synonym=p_synonym)  # type: ignore[arg-type]
    return record(spec.replace(instruction=text), f"paraphrase:{tier}", ["instruction"])


class ChangeTaskArgs(OperatorArgs):
    change: Literal["any", "target", "destination", "fraction"] = "any"  # what part of the goal changes


def _task_options(spec: ScenarioSpec) -> dict[str, list[GoalPredicate]]:
    """Every alternative goal in the same layout, grouped by what changes."""
    g = spec.goal[0]
    in_goal = set(g.args)
    out: dict[str, list[GoalPredicate]] = {"target": [], "destination": [], "fraction": []}
    if spec.family == "drawer":
        for word, value in DRAWER_FRACTIONS.items():
            if word != fraction_word(g.value or 0.0):
                out["fraction"].append(g.model_copy(update={"value": value}))
        return out
    others = [o.name for o in spec.objects if o.name not in in_goal]
    if spec.family in ("pick_place", "push"):
        out["target"] = [g.model_copy(update={"args": (n, g.args[1])}) for n in others]
        pool = spec.containers if spec.family == "pick_place" else spec.regions
        out["destination"] = [g.model_copy(update={"args": (g.args[0], e.name)}) for e in pool if e.name not in in_goal]
    else:  # stack: another top on the same bottom, or the same top on another bottom
        out["target"] = [g.model_copy(update={"args": (n, g.args[1])}) for n in others]
        out["destination"] = [g.model_copy(update={"args": (g.args[0], n)}) for n in others]
    return out


def _with_goal(spec: ScenarioSpec, goal: GoalPredicate) -> ScenarioSpec:
    out = spec.replace(goal=(goal, *spec.goal[1:]))
    if goal.name == "drawer_fraction" and goal.value is not None:
        d = spec.entity(goal.args[0])
        if isinstance(d, DrawerSpec) and abs(d.fraction - goal.value) <= (goal.tol or DRAWER_TOL) + 0.2:
            # the drawer must start away from the new goal, else the task is done at reset
            start = 1.0 if goal.value < 0.5 else 0.0
            out = with_entity(out, d.name, fraction=start)
    return out


@operator("change_task", ChangeTaskArgs)
def change_task(rng: np.random.Generator, spec: ScenarioSpec, *, change: str) -> ScenarioSpec:
    """Same layout, another goal: another target object, container/region/bottom, or drawer fraction."""
    options = _task_options(spec)
    kinds = [k for k, v in options.items() if v] if change == "any" else [change]
    feasible: list[ScenarioSpec] = []
    for kind in kinds:
        if not options.get(kind):
            have = [k for k, v in options.items() if v]
            raise OperatorError(f"change_task change='{kind}' is not possible in this {spec.family} scene. Possible: {have}")
    for kind in kinds:
        for goal in options[kind]:
            cand = _with_goal(spec, goal)
            if not problems(cand):
                feasible.append(cand)
    if not feasible:
        raise OperatorError(f"change_task: no feasible alternative goal in this {spec.family} scene")
    out = retell("change_task", spec, choose(rng, feasible))
    g = out.goal[0]
    text = f"{g.name}({','.join(g.args)})" + (f"={g.value}" if g.value is not None else "")
    return record(out, f"change_task:{text}", ["task"])


# ---- objects --------------------------------------------------------------------------------------


class RecolorArgs(OperatorArgs):
    object: Ref = "target"  # entity to recolour (object, container, region or drawer)
    colors: list[str] | None = None  # colours to draw from (None = the whole palette)

    @field_validator("colors")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or any(c not in PALETTE for c in v)):
            raise ValueError(f"colours {v} are not a non-empty subset of the palette {sorted(PALETTE)}")
        return v


def _distinct(spec: ScenarioSpec, name: str, cand: Any) -> bool:
    """True if the candidate entity stays distinguishable in words from its peers."""
    if isinstance(cand, ObjectSpec):
        return all(object_key(o) != object_key(cand) for o in spec.objects if o.name != name)
    if isinstance(cand, ContainerSpec):
        return all(container_key(c) != container_key(cand) for c in spec.containers if c.name != name)
    peers = spec.regions if isinstance(cand, RegionSpec) else spec.drawers
    return all(p.color != cand.color for p in peers if p.name != name)


@operator("recolor", RecolorArgs)
def recolor(rng: np.random.Generator, spec: ScenarioSpec, *, object: Ref, colors: list[str] | None) -> ScenarioSpec:
    """Give an entity another colour (distinct from its current one and from look-alike peers)."""
    name = resolve(rng, spec, object)
    e = spec.entity(name)
    pool = [c for c in (colors or list(PALETTE)) if c != e.color and _distinct(spec, name, e.model_copy(update={"color": c}))]
    if not pool:
        raise OperatorError(f"recolor: no colour in {colors or sorted(PALETTE)} keeps '{name}' distinguishable")
    c = choose(rng, pool)
    out = retell("recolor", spec, with_entity(spec, name, color=c))
    return record(out, f"recolor:{name}->{c}", [f"object:{name}:color"])


class ResizeArgs(OperatorArgs):
    object: Ref = "target"  # object to resize
    scale: tuple[float, float] | None = None  # range of a uniform scale factor on all half extents
    half: tuple[float, float] | None = None  # or: range of the new narrow half width (other extents follow), metres
    tries: int = Field(50, ge=1)  # draws before giving up

    @model_validator(mode="after")
    def _one(self) -> "ResizeArgs":
        if (self.scale is None) == (self.half is None):
            raise ValueError("give exactly one of 'scale' or 'half'")
        for r in (self.scale, self.half):
            if r is not None:
                ordered_range(r)
                if r[0] <= 0:
                    raise ValueError(f"range {r} must be positive")
        return self


@operator("resize", ResizeArgs)
def resize(rng: np.random.Generator, spec: ScenarioSpec, *, object: Ref, scale: tuple | None, half: tuple | None, tries: int) -> ScenarioSpec:
    """Scale an object (its role limits hold: graspable targets stay 3-6 cm wide, push objects >= 10 cm)."""
    name = resolve(rng, spec, object)
    obj = spec.entity(name)
    if not isinstance(obj, ObjectSpec):
        raise OperatorError(f"resize applies to objects; '{name}' is a {type(obj).__name__}")
    narrow = min(obj.size[0], obj.size[1])
    for _ in range(tries):
        f = uniform(rng, scale) if scale is not None else uniform(rng, half) / narrow  # type: ignore[arg-type]
        size = tuple(round(min(s * f, 0.2), 4) for s in obj.size)
        cand = with_entity(spec, name, size=size)
        if _distinct(spec, name, cand.entity(name)) and not problems(cand):
            out = retell("resize", spec, cand)
            return record(out, f"resize:{name}x{f:.2f}", [f"object:{name}:size"])
    raise OperatorError(f"resize: no size of '{name}' in the given range keeps the scene feasible after {tries} tries")


class ReshapeArgs(OperatorArgs):
    object: Ref = "target"  # object to reshape
    shapes: list[ObjectShape] = ["box", "cylinder", "sphere"]  # shapes to draw from (the current one is excluded)


@operator("reshape", ReshapeArgs)
def reshape(rng: np.random.Generator, spec: ScenarioSpec, *, object: Ref, shapes: list[str]) -> ScenarioSpec:
    """Give an object another primitive shape with the same narrow width (a box becomes a cylinder, ...)."""
    name = resolve(rng, spec, object)
    obj = spec.entity(name)
    if not isinstance(obj, ObjectSpec):
        raise OperatorError(f"reshape applies to objects; '{name}' is a {type(obj).__name__}")
    r = min(obj.size[0], obj.size[1])
    sizes = {"box": (r, r, r), "cylinder": (r, r, max(obj.size[2], 0.02)), "sphere": (r, r, r)}
    feasible = []
    for shape in shapes:
        if shape == obj.shape:
            continue
        cand = with_entity(spec, name, shape=shape, size=sizes[shape], yaw=0.0)
        if _distinct(spec, name, cand.entity(name)) and not problems(cand):
            feasible.append((shape, cand))
    if not feasible:
        raise OperatorError(f"reshape: no shape in {shapes} other than '{obj.shape}' keeps '{name}' feasible and distinguishable")
    shape, cand = choose(rng, feasible)
    out = retell("reshape", spec, cand)
    return record(out, f"reshape:{name}->{shape}", [f"object:{name}:shape"])


class DistractorArgs(OperatorArgs):
    n: int | tuple[int, int] = 1  # how many distractors (or an inclusive range)
    kind: Literal["random", "lookalike"] = "random"  # lookalike: same shape or same colour as the target
    region: str = "table"  # where they go; "near_target" = within 12 cm of the target
    colors: list[str] | None = None  # colour pool (None = palette)
    tries: int = Field(500, ge=1)  # placement draws per distractor

    @field_validator("region")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in REGIONS and v != "near_target":
            raise ValueError(f"unknown region '{v}'. Available: {sorted(REGIONS) + ['near_target']}")
        return v

    @field_validator("n")
    @classmethod
    def _count(cls, v: int | tuple[int, int]) -> int | tuple[int, int]:
        lo, hi = (v, v) if isinstance(v, int) else v
        if not 1 <= lo <= hi <= 6:
            raise ValueError(f"n {v} must be in 1..6 (as a number or a (low, high) range)")
        return v


def _distractor(rng: np.random.Generator, spec: ScenarioSpec, name: str, kind: str, colors: list[str]) -> ObjectSpec:
    target = spec.entity(spec.goal[0].args[0])
    for _ in range(200):
        shape = choose(rng, ["box", "cylinder", "sphere"])
        color = choose(rng, colors)
        if kind == "lookalike":
            if isinstance(target, ObjectSpec) and rng.random() < 0.5:
                shape = target.shape
            else:
                color = target.color
        wide = isinstance(target, ObjectSpec) and kind == "lookalike" and shape == target.shape and spec.family == "push"
        h = uniform(rng, PUSH_HALF if wide else (0.018, GRASP_HALF[1] - 0.002))
        size = (h, h, h) if shape != "cylinder" else (h, h, uniform(rng, (0.02, 0.035)))
        if shape == "sphere" and wide:
            continue
        obj = ObjectSpec(name=name, shape=shape, size=size, color=color, pos=(0.0, 0.0))  # type: ignore[arg-type]
        if _distinct(spec, name, obj):
            return obj
    raise OperatorError(f"add_distractors: cannot draw a {kind} distractor distinguishable from the scene's objects")


@operator("add_distractors", DistractorArgs)
def add_distractors(rng: np.random.Generator, spec: ScenarioSpec, *, n: int | tuple, kind: str, region: str, colors: list[str] | None, tries: int) -> ScenarioSpec:
    """Add objects that play no part in the goal: random ones, or look-alikes of the target."""
    count = n if isinstance(n, int) else int(rng.integers(n[0], n[1] + 1))
    names = {e.name for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)}
    out = spec
    added = []
    for _ in range(count):
        k = 0
        while f"obj{k}" in names:
            k += 1
        name = f"obj{k}"
        names.add(name)
        obj = _distractor(rng, out, name, kind, colors or list(PALETTE))
        out = out.replace(objects=(*out.objects, obj))
        out = _place(rng, out, name, region, 0.03, tries)
        added.append(name)
    return record(out, f"add_distractors:{kind}:{','.join(added)}", ["distractor"])


# ---- physics --------------------------------------------------------------------------------------


class PhysicsArgs(OperatorArgs):
    friction: tuple[float, float] | None = None  # range of the friction scale (all objects)
    mass: tuple[float, float] | None = None  # range of the mass scale (all objects)
    damping: tuple[float, float] | None = None  # range of a factor on every drawer's slide damping

    @model_validator(mode="after")
    def _some(self) -> "PhysicsArgs":
        given = [r for r in (self.friction, self.mass, self.damping) if r is not None]
        if not given:
            raise ValueError("give at least one of 'friction', 'mass', 'damping'")
        for r in given:
            ordered_range(r)
            if r[0] <= 0:
                raise ValueError(f"range {r} must be positive")
        return self


@operator("scale_physics", PhysicsArgs)
def scale_physics(rng: np.random.Generator, spec: ScenarioSpec, *, friction: tuple | None, mass: tuple | None, damping: tuple | None) -> ScenarioSpec:
    """Scale friction and/or mass of every object (PhysicsSpec), or drawer damping."""
    phys = spec.physics
    updates: dict[str, float] = {}
    factors, parts = [], []
    if friction is not None:
        updates["friction_scale"] = uniform(rng, friction)
        factors.append("physics:friction")
        parts.append(f"friction={updates['friction_scale']}")
    if mass is not None:
        updates["mass_scale"] = uniform(rng, mass)
        factors.append("physics:mass")
        parts.append(f"mass={updates['mass_scale']}")
    out = spec.replace(physics=phys.model_copy(update=updates))
    if damping is not None:
        if not spec.drawers:
            raise OperatorError("scale_physics damping needs a drawer; this scene has none")
        f = uniform(rng, damping)
        for d in spec.drawers:
            out = with_entity(out, d.name, damping=round(d.damping * f, 4))
        factors.append("physics:damping")
        parts.append(f"damping_x{f}")
    out = out.replace(physics=out.physics)  # re-validate ranges (PhysicsSpec bounds)
    return record(out, "scale_physics:" + ",".join(parts), factors)


# ---- composition ----------------------------------------------------------------------------------


class OpCall(BaseModel):
    """One step of a program: a registered operator and its arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str  # registered operator name
    args: dict[str, Any] = Field(default_factory=dict)  # arguments, validated against the operator's model

    @model_validator(mode="after")
    def _valid(self) -> "OpCall":
        if self.op not in OPERATORS:
            raise ValueError(f"Unknown operator '{self.op}'. Available: {OPERATORS.names()}")
        try:
            OPERATORS.get(self.op).args_model.model_validate(self.args)
        except ValidationError as e:
            raise ValueError(validation_message(f"operator '{self.op}'", e)) from None
        return self


class OneOfArgs(OperatorArgs):
    options: list[list[OpCall]] = Field(min_length=1)  # alternative operator sequences
    weights: list[float] | None = None  # relative weights (None = uniform)

    @model_validator(mode="after")
    def _weights(self) -> "OneOfArgs":
        if self.weights is not None and (len(self.weights) != len(self.options) or any(w < 0 for w in self.weights) or sum(self.weights) <= 0):
            raise ValueError(f"weights {self.weights} must be {len(self.options)} non-negative numbers with a positive sum")
        return self


@operator("one_of", OneOfArgs)
def one_of(rng: np.random.Generator, spec: ScenarioSpec, *, options: list[list[OpCall]], weights: list[float] | None) -> ScenarioSpec:
    """Apply one of several operator sequences, drawn by weight (a mixture of edits)."""
    w = np.asarray(weights if weights is not None else [1.0] * len(options), dtype=float)
    i = int(rng.choice(len(options), p=w / w.sum()))
    for call in options[i]:
        spec = apply_operator(rng, spec, call.op, call.args)
    return spec


def describe_operators() -> dict[str, str]:
    """Operator name -> one-line description (for help texts and error messages)."""
    return {n: OPERATORS.get(n).doc for n in OPERATORS.names()}


__all__ = [
    "OPERATORS",
    "OneOfArgs",
    "OpCall",
    "Operator",
    "OperatorError",
    "apply_operator",
    "derive",
    "describe_operators",
    "goal_names",
    "parse_args",
    "resolve",
]
