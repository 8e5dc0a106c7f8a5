"""Base-scene generators: `sample_base(family, rng, params) -> ScenarioSpec`, pure given the rng.

Every family makes one target + a few other objects and its fixtures, role-free: entity names carry no
role (`obj0`.. in shuffled order, `container0`.., `region0`.., `drawer0`), and only the instruction and
the goal say which object is the target.

| family     | target                         | goal fixture (`goal_region`)        | alternative (`alt_region`)       |
| ---------- | ------------------------------ | ----------------------------------- | -------------------------------- |
| pick_place | graspable object               | container (tray or bowl): in()      | a second container               |
| stack      | graspable box (the top)        | a larger box (the bottom): on()     | -                                |
| push       | wide box or cylinder (>=10 cm) | marked goal region: at_region()     | a second region + a second wide object |
| drawer     | the drawer                     | cabinet position; drawer_fraction() | -                                |

Graspable objects are 3-6 cm wide across their narrow side; push objects are at least 10 cm wide, too
wide for the gripper.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from coda.errors import CodaError
from coda.scene.language import DRAWER_FRACTIONS, DRAWER_TOL, canonical_instruction, object_key
from coda.scene.regions import REGIONS, footprint, place
from coda.scene.spec import (
    FAMILIES,
    PALETTE,
    ContainerKind,
    ContainerSpec,
    DrawerSpec,
    GoalPredicate,
    ObjectShape,
    ObjectSpec,
    Provenance,
    RegionSpec,
    ScenarioSpec,
    format_validation_error,
)

GRASP_HALF = (0.015, 0.03)  # allowed half width across the narrow side of a graspable object, metres
GRASP_HALF_DEFAULT = (0.018, 0.028)  # narrow half width of other graspable objects, metres
PUSH_HALF = (0.05, 0.065)  # half width of push objects (>= 10 cm wide), metres
CONTAINER_HALF: dict[str, tuple[float, float, float]] = {
    "tray": (0.055, 0.075, 0.012),  # inner half extents x, y and wall half-height (long side across the table)
    "bowl": (0.055, 0.055, 0.02),
}
REGION_HALF = (0.06, 0.06)  # goal region half extents, metres
DRAWER_TRAVEL = 0.15  # drawer opening distance, metres
FIXTURE_COLORS = ("gray", "white", "black", "brown")  # containers and cabinets
REGION_COLORS = ("green", "blue", "red", "yellow", "purple", "orange")


class GeneratorError(CodaError, ValueError):
    """Bad generator parameters or an unknown family; the message names the field and value."""


class BaseParams(BaseModel):
    """Parameters of the base-scene generators (one model for all families; unused fields are ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_region: str = "table"  # where the target's centre is drawn (drawer: unused)
    goal_region: str = "table"  # container / bottom box / goal region / cabinet position
    alt_region: str = "table"  # second container (pick_place) or second region (push)
    others_region: str = "table"  # where the other objects go
    wide_region: str = "table"  # push: where the second wide (push-sized) object goes
    n_others: tuple[int, int] = (1, 3)  # inclusive range of other objects (push: small ones besides the wide one)
    with_alt: bool = True  # add the alternative container / region (+ wide object for push)
    colors: tuple[str, ...] = tuple(PALETTE)  # object colours
    target_shapes: tuple[ObjectShape, ...] = ("box",)  # target shapes (stack: always box)
    other_shapes: tuple[ObjectShape, ...] = ("box", "cylinder")  # shapes of other objects
    target_half: tuple[float, float] = (0.018, 0.028)  # range of the target's narrow half width, metres
    push_half: tuple[float, float] = PUSH_HALF  # range of push objects' half widths, metres
    block_prob: float = Field(0.5, ge=0, le=1)  # chance a box is an elongated block rather than a cube
    container_kinds: tuple[ContainerKind, ...] = ("tray", "bowl")  # kinds the goal container is drawn from
    fixture_colors: tuple[str, ...] = FIXTURE_COLORS  # colours of containers and cabinets
    region_colors: tuple[str, ...] = REGION_COLORS  # colours of marked goal regions
    drawer_start: float = Field(0.0, ge=0, le=1)  # initial opening fraction of the drawer
    drawer_goal: str = "open"  # drawer goal word: open / half / close
    max_yaw: float = Field(0.35, ge=0, le=math.pi)  # objects' |yaw| bound, radians
    clearance: float = Field(0.03, ge=0, le=0.1)  # gap between sampled footprints, metres
    max_tries: int = Field(500, ge=1)  # placement tries per entity

    @field_validator("target_region", "goal_region", "alt_region", "others_region", "wide_region")
    @classmethod
    def _known_region(cls, v: str) -> str:
        if v not in REGIONS:
            raise ValueError(f"unknown region '{v}'. Available: {sorted(REGIONS)}")
        return v

    @field_validator("colors", "fixture_colors", "region_colors")
    @classmethod
    def _known_colors(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [c for c in v if c not in PALETTE]
        if bad or not v:
            raise ValueError(f"colours {bad or list(v)} are not a non-empty subset of the palette {sorted(PALETTE)}")
        return v

    @field_validator("drawer_goal")
    @classmethod
    def _known_goal(cls, v: str) -> str:
        if v not in DRAWER_FRACTIONS:
            raise ValueError(f"unknown drawer goal '{v}'. Available: {list(DRAWER_FRACTIONS)}")
        return v

    @field_validator("n_others")
    @classmethod
    def _count(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 0 <= v[0] <= v[1] <= 6:
            raise ValueError(f"range {tuple(v)} must satisfy 0 <= low <= high <= 6")
        return v

    @field_validator("target_half")
    @classmethod
    def _graspable(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not GRASP_HALF[0] <= v[0] <= v[1] <= GRASP_HALF[1]:
            raise ValueError(f"range {tuple(v)} must lie within the graspable half widths {GRASP_HALF}")
        return v

    @field_validator("push_half")
    @classmethod
    def _pushable(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not PUSH_HALF[0] <= v[0] <= v[1] <= 0.1:
            raise ValueError(f"range {tuple(v)} must satisfy {PUSH_HALF[0]} <= low <= high <= 0.1 (too wide to grasp)")
        return v

    @field_validator("target_shapes", "other_shapes", "container_kinds")
    @classmethod
    def _nonempty(cls, v: tuple) -> tuple:
        if not v:
            raise ValueError("must not be empty")
        return v


def validation_message(what: str, err: ValidationError) -> str:
    """One line naming each bad field (cross-field checks name no field, so none is shown)."""
    return format_validation_error(what, err).replace(" field '':", ":")


def parse_params(params: BaseParams | dict[str, Any] | None) -> BaseParams:
    """Validate generator parameters. Raises GeneratorError naming the field and value."""
    if isinstance(params, BaseParams):
        return params
    try:
        return BaseParams.model_validate(params or {})
    except ValidationError as e:
        raise GeneratorError(validation_message("generator params", e)) from None


# ---- sampling helpers -----------------------------------------------------------------------------


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return round(float(rng.uniform(lo, hi)), 4)


def sample_graspable(
    rng: np.random.Generator, shape: str, half: tuple[float, float], block_prob: float
) -> tuple[tuple[float, float, float], float]:
    """Half extents of a graspable object of `shape` whose narrow half width is drawn from `half`.

    Returns:
        (size, narrow half width); a box is a cube, or with probability `block_prob` an elongated block.
    """
    h = _u(rng, *half)
    if shape == "box":
        if rng.random() < block_prob:
            long = round(min(h * float(rng.uniform(1.3, 1.7)), 0.045), 4)
            hz = round(h * float(rng.uniform(0.8, 1.2)), 4)
            size = (long, h, hz) if rng.random() < 0.5 else (h, long, hz)
        else:
            size = (h, h, h)
    elif shape == "cylinder":
        size = (h, h, _u(rng, 0.02, 0.035))
    else:
        size = (h, h, h)
    return size, h


def _new_object(
    rng: np.random.Generator,
    name: str,
    shapes: tuple[str, ...],
    colors: tuple[str, ...],
    half: tuple[float, float],
    block_prob: float,
    taken: set[tuple[str, str, str]],
    max_yaw: float,
    wide: tuple[float, float] | None = None,
) -> ObjectSpec:
    # Draw until the description key is new in the scene, so words identify every object.
    for _ in range(200):
        shape = shapes[int(rng.integers(len(shapes)))]
        color = colors[int(rng.integers(len(colors)))]
        if wide is not None:  # push object: both horizontal half extents within `wide`
            h = _u(rng, *wide)
            size = (h, h, _u(rng, 0.025, 0.035)) if shape != "box" else (h, _u(rng, wide[0], h), _u(rng, 0.025, 0.035))
        else:
            size, _ = sample_graspable(rng, shape, half, block_prob)
        yaw = _u(rng, -max_yaw, max_yaw) if shape == "box" else 0.0
        obj = ObjectSpec(name=name, shape=shape, size=size, color=color, pos=(0.0, 0.0), yaw=yaw)  # type: ignore[arg-type]
        if object_key(obj) not in taken:
            taken.add(object_key(obj))
            return obj
    raise GeneratorError(
        f"cannot draw a distinguishable object from colours {list(colors)} and shapes {list(shapes)}"
    )


def _placed(rng: np.random.Generator, e: Any, region_name: str, occupied: list, p: BaseParams) -> Any:
    pos = place(rng, e.name, region_name, e, occupied, clearance=p.clearance, max_tries=p.max_tries)
    e = e.model_copy(update={"center": pos} if isinstance(e, RegionSpec) else {"pos": pos})
    occupied.append(footprint(e))
    return e


def _fixture_color(rng: np.random.Generator, used: set[str], pool: tuple[str, ...]) -> str:
    free = [c for c in pool if c not in used] or list(pool)
    c = free[int(rng.integers(len(free)))]
    used.add(c)
    return c


def _finish(
    rng: np.random.Generator,
    family: str,
    objects: list[ObjectSpec],
    goal: GoalPredicate,
    *,
    containers: Sequence[ContainerSpec] = (),
    drawers: Sequence[DrawerSpec] = (),
    regions: Sequence[RegionSpec] = (),
) -> ScenarioSpec:
    """Shuffle entity order, give role-free names, write the canonical instruction."""
    rename: dict[str, str] = {}
    objs = [objects[i] for i in rng.permutation(len(objects))]
    for i, o in enumerate(objs):
        rename[o.name] = f"obj{i}"
    conts = [containers[i] for i in rng.permutation(len(containers))] if containers else []
    for i, c in enumerate(conts):
        rename[c.name] = f"container{i}"
    regs = [regions[i] for i in rng.permutation(len(regions))] if regions else []
    for i, r in enumerate(regs):
        rename[r.name] = f"region{i}"
    for i, d in enumerate(drawers):
        rename[d.name] = f"drawer{i}"
    spec = ScenarioSpec(
        family=family,  # type: ignore[arg-type]
        objects=tuple(o.model_copy(update={"name": rename[o.name]}) for o in objs),
        containers=tuple(c.model_copy(update={"name": rename[c.name]}) for c in conts),
        drawers=tuple(d.model_copy(update={"name": rename[d.name]}) for d in drawers),
        regions=tuple(r.model_copy(update={"name": rename[r.name]}) for r in regs),
        instruction="-",
        goal=(goal.model_copy(update={"args": tuple(rename[a] for a in goal.args)}),),
        seed=int(rng.integers(0, 2**31 - 1)),
        provenance=Provenance(program="base", operators=(f"base:{family}",)),
    )
    return spec.replace(instruction=canonical_instruction(spec))


def _others(rng: np.random.Generator, p: BaseParams, taken: set, occupied: list, start: int) -> list[ObjectSpec]:
    n = int(rng.integers(p.n_others[0], p.n_others[1] + 1))
    out = []
    for i in range(n):
        o = _new_object(rng, f"o{start + i}", p.other_shapes, p.colors, GRASP_HALF_DEFAULT, p.block_prob, taken, p.max_yaw)
        out.append(_placed(rng, o, p.others_region, occupied, p))
    return out


# ---- families -------------------------------------------------------------------------------------


def _container(rng: np.random.Generator, name: str, kind: str, used: set[str], pool: tuple[str, ...]) -> ContainerSpec:
    hx, hy, hz = CONTAINER_HALF[kind]
    return ContainerSpec(name=name, kind=kind, size=(hx, hy, hz), color=_fixture_color(rng, used, pool), pos=(0.0, 0.0))  # type: ignore[arg-type]


def _pick_place(rng: np.random.Generator, p: BaseParams) -> ScenarioSpec:
    occupied: list = []
    used: set[str] = set()
    kind = p.container_kinds[int(rng.integers(len(p.container_kinds)))]
    goal_c = _placed(rng, _container(rng, "c_goal", kind, used, p.fixture_colors), p.goal_region, occupied, p)
    containers = [goal_c]
    if p.with_alt:
        alt_kind = "bowl" if kind == "tray" else "tray"  # the other kind, so the words differ
        containers.append(_placed(rng, _container(rng, "c_alt", alt_kind, used, p.fixture_colors), p.alt_region, occupied, p))
    taken: set = set()
    target = _new_object(rng, "o_target", p.target_shapes, p.colors, p.target_half, p.block_prob, taken, p.max_yaw)
    target = _placed(rng, target, p.target_region, occupied, p)
    objects = [target, *_others(rng, p, taken, occupied, 0)]
    goal = GoalPredicate(name="in", args=(target.name, goal_c.name))
    return _finish(rng, "pick_place", objects, goal, containers=containers)


def _stack(rng: np.random.Generator, p: BaseParams) -> ScenarioSpec:
    occupied: list = []
    taken: set = set()
    lo, hi = p.target_half
    top = _new_object(rng, "o_top", ("box",), p.colors, (lo, hi), 0.0, taken, p.max_yaw)
    bottom_half = (min(top.size[0] + 0.004, GRASP_HALF[1]), GRASP_HALF[1])  # the bottom is at least as wide
    bottom = _new_object(rng, "o_bottom", ("box",), p.colors, bottom_half, 0.0, taken, p.max_yaw)
    bottom = _placed(rng, bottom, p.goal_region, occupied, p)
    top = _placed(rng, top, p.target_region, occupied, p)
    objects = [top, bottom, *_others(rng, p, taken, occupied, 0)]
    return _finish(rng, "stack", objects, GoalPredicate(name="on", args=(top.name, bottom.name)))


def _region(rng: np.random.Generator, name: str, used: set[str], pool: tuple[str, ...]) -> RegionSpec:
    return RegionSpec(name=name, center=(0.0, 0.0), half=REGION_HALF, color=_fixture_color(rng, used, pool))


def _push(rng: np.random.Generator, p: BaseParams) -> ScenarioSpec:
    from coda.scene.layout import push_corridor

    occupied: list = []
    used: set[str] = set()
    goal_r = _placed(rng, _region(rng, "r_goal", used, p.region_colors), p.goal_region, occupied, p)
    taken: set = set()
    shapes = tuple(s for s in p.target_shapes if s != "sphere") or ("box",)
    target = _new_object(rng, "o_target", shapes, p.colors, p.target_half, 0.0, taken, 0.0, wide=p.push_half)
    target = _placed(rng, target, p.target_region, occupied, p)
    occupied.append(push_corridor(target, goal_r))  # keep the push path free of everything else
    regions, objects = [goal_r], [target]
    if p.with_alt:
        regions.append(_placed(rng, _region(rng, "r_alt", used, p.region_colors), p.alt_region, occupied, p))
        wide = _new_object(rng, "o_wide", shapes, p.colors, p.target_half, 0.0, taken, 0.0, wide=p.push_half)
        objects.append(_placed(rng, wide, p.wide_region, occupied, p))
    objects += _others(rng, p, taken, occupied, 0)
    return _finish(rng, "push", objects, GoalPredicate(name="at_region", args=(target.name, goal_r.name)), regions=regions)


def _drawer(rng: np.random.Generator, p: BaseParams) -> ScenarioSpec:
    occupied: list = []
    used: set[str] = set()
    d = DrawerSpec(
        name="d", color=_fixture_color(rng, used, p.fixture_colors), pos=(0.0, 0.0), travel=DRAWER_TRAVEL, fraction=p.drawer_start
    )
    d = _placed(rng, d, p.goal_region, occupied, p)
    taken: set = set()
    objects = _others(rng, p, taken, occupied, 0)
    value = DRAWER_FRACTIONS[p.drawer_goal]
    goal = GoalPredicate(name="drawer_fraction", args=(d.name,), value=value, tol=DRAWER_TOL)
    if abs(p.drawer_start - value) <= DRAWER_TOL:
        raise GeneratorError(f"drawer_start {p.drawer_start} already satisfies drawer_goal '{p.drawer_goal}'")
    return _finish(rng, "drawer", objects, goal, drawers=[d])


GENERATORS: dict[str, Callable[[np.random.Generator, BaseParams], ScenarioSpec]] = {
    "pick_place": _pick_place,
    "stack": _stack,
    "push": _push,
    "drawer": _drawer,
}


def sample_base(family: str, rng: np.random.Generator, params: BaseParams | dict[str, Any] | None = None) -> ScenarioSpec:
    """One base scene of a family, pure given `rng`.

    Args:
        family: one of FAMILIES.
        rng: the only source of randomness (numpy Generator).
        params: BaseParams or a dict of its fields (validated); None = defaults.

    Returns:
        A ScenarioSpec with a canonical instruction and provenance ("base", ("base:<family>",)).

    Raises:
        GeneratorError: unknown family or bad params. PlacementError: a region too crowded for the layout.
    """
    if family not in GENERATORS:
        raise GeneratorError(f"Unknown family '{family}'. Available: {list(FAMILIES)}")
    return GENERATORS[family](rng, parse_params(params))
