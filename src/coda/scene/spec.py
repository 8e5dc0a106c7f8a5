"""ScenarioSpec: the typed, versioned, JSON-round-trippable description of one tabletop scene.

A ScenarioSpec is everything needed to build a scene and judge success in it: objects and fixtures with
their placements, the instruction in words, the goal as predicates over the state, physics settings, the
robot's start pose, the seed, and the provenance (which program made it). It is plain data: building the
MuJoCo model from it is `coda.sim.tabletop`'s job.

Frame: metres, the table top is the plane z = 0, x points away from the robot base (far), y to the left.
The workspace is |x| <= 0.30, |y| <= 0.30 (see `WORKSPACE`).
"""

from __future__ import annotations

import hashlib
import json
import math
import string
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coda.errors import CodaError, SchemaVersionError
from coda.redact import short_repr

SCHEMA_VERSION = 1

FAMILIES = ("pick_place", "stack", "push", "drawer")
Family = Literal["pick_place", "stack", "push", "drawer"]

# Named colours the language can refer to (RGBA). Synonyms for paraphrase live in coda.scene.language.
PALETTE: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.12, 0.12, 1.0),
    "green": (0.15, 0.65, 0.2, 1.0),
    "blue": (0.15, 0.3, 0.85, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
    "orange": (0.95, 0.5, 0.05, 1.0),
    "purple": (0.55, 0.2, 0.7, 1.0),
    "white": (0.92, 0.92, 0.92, 1.0),
    "black": (0.08, 0.08, 0.08, 1.0),
    "pink": (0.95, 0.5, 0.7, 1.0),
    "brown": (0.5, 0.3, 0.12, 1.0),
    "gray": (0.5, 0.5, 0.5, 1.0),
    "cyan": (0.1, 0.8, 0.85, 1.0),
}

# Axis-aligned workspace on the table top: (x_min, x_max, y_min, y_max) in metres.
WORKSPACE = (-0.30, 0.30, -0.30, 0.30)

ObjectShape = Literal["box", "cylinder", "sphere"]
ContainerKind = Literal["bowl", "tray"]
GoalName = Literal["in", "on", "at_region", "drawer_fraction"]


class SpecError(CodaError, ValueError):
    """A ScenarioSpec (or its JSON) is invalid; the message names the field and the value."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Characters an instruction may hold (the observation's text space).
TEXT_CHARSET = frozenset(string.ascii_letters + string.digits + string.punctuation + " ")


def outside_charset(text: str) -> list[str]:
    """The characters of `text` outside TEXT_CHARSET, sorted (empty when all fit)."""
    return sorted(set(text) - TEXT_CHARSET)

# Every number of a scene is finite, and every place lies on the table, before any simulator sees it.
Finite = Annotated[float, Field(allow_inf_nan=False)]
Coord = Annotated[float, Field(allow_inf_nan=False, ge=WORKSPACE[0], le=WORKSPACE[1])]  # the workspace is square
Yaw = Annotated[float, Field(allow_inf_nan=False, ge=-2 * math.pi, le=2 * math.pi)]  # radians
MIN_EXTENT = 0.005  # metres: smaller bodies have no mass or inertia the simulator can integrate
Extent = Annotated[float, Field(allow_inf_nan=False, ge=MIN_EXTENT, le=0.3)]  # a half extent, metres
Vec2 = tuple[Finite, Finite]
Vec3 = tuple[Finite, Finite, Finite]
Pos2 = tuple[Coord, Coord]  # (x, y) inside WORKSPACE


class ObjectSpec(_Frozen):
    """A free rigid primitive on the table."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")  # unique id within the scene, e.g. "obj0"
    shape: ObjectShape  # primitive type
    size: Vec3  # half extents (box: x, y, z; cylinder: r, r, half-height; sphere: r, r, r), metres
    color: str  # a PALETTE name
    mass: float = Field(0.1, ge=0.001, le=5.0)  # kg
    friction: float = Field(1.0, ge=0.001, le=5.0)  # sliding friction coefficient
    pos: Pos2  # (x, y) of the centre on the table; z follows from the size (resting on the table)
    yaw: Yaw = 0.0  # rotation about z, radians
    on: str | None = None  # name of an object it starts stacked on (z follows); None = on the table

    @field_validator("color")
    @classmethod
    def _known_color(cls, v: str) -> str:
        if v not in PALETTE:
            raise ValueError(f"colour {v!r} is not in the palette {sorted(PALETTE)}")
        return v

    @field_validator("size")
    @classmethod
    def _positive_size(cls, v: Vec3) -> Vec3:
        if not all(MIN_EXTENT <= s <= 0.2 for s in v):
            raise ValueError(f"half extents {v} must be in [{MIN_EXTENT}, 0.2] m")
        return v


class ContainerSpec(_Frozen):
    """A static open container (bowl or tray) objects can be placed in."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: ContainerKind
    size: tuple[Extent, Extent, Extent]  # inner half extents (x, y) and wall half-height (z), metres
    color: str
    pos: Pos2
    yaw: Yaw = 0.0

    _known_color = field_validator("color")(ObjectSpec._known_color.__func__)  # type: ignore[attr-defined]


class DrawerSpec(_Frozen):
    """A cabinet fixed to the table with one drawer on a slide joint and a handle facing the robot."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    color: str
    pos: Pos2  # centre of the cabinet footprint
    yaw: Yaw = 0.0  # 0 = drawer opens towards -x (towards the robot)
    travel: float = Field(0.15, gt=0.02, le=0.3)  # full opening distance, metres
    fraction: float = Field(0.0, ge=0, le=1)  # initial opening fraction
    damping: float = Field(2.0, ge=0, le=100)  # slide joint damping

    _known_color = field_validator("color")(ObjectSpec._known_color.__func__)  # type: ignore[attr-defined]


class RegionSpec(_Frozen):
    """A marked rectangular goal region drawn on the table (for push)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    center: Pos2
    half: tuple[Extent, Extent]  # half extents (x, y), metres
    color: str

    _known_color = field_validator("color")(ObjectSpec._known_color.__func__)  # type: ignore[attr-defined]


class GoalPredicate(_Frozen):
    """One conjunct of the goal. Success = every conjunct holds.

    - in(obj, container)              obj rests inside the container
    - on(top, bottom)                 top rests on bottom
    - at_region(obj, region)          obj's centre lies inside the region
    - drawer_fraction(drawer) value±tol  drawer opening fraction within tol of value
    """

    name: GoalName
    args: tuple[str, ...]
    value: float | None = None
    tol: float | None = None

    @model_validator(mode="after")
    def _arity(self) -> "GoalPredicate":
        want = {"in": 2, "on": 2, "at_region": 2, "drawer_fraction": 1}[self.name]
        if len(self.args) != want:
            raise ValueError(f"goal '{self.name}' takes {want} args, got {list(self.args)}")
        if self.name == "drawer_fraction" and (self.value is None or self.tol is None):
            raise ValueError("goal 'drawer_fraction' needs value and tol")
        return self


class PhysicsSpec(_Frozen):
    friction_scale: float = Field(1.0, ge=0.01, le=5)  # multiplies every object's friction
    mass_scale: float = Field(1.0, ge=0.01, le=10)  # multiplies every object's mass
    gravity: float = Field(9.81, ge=0.1, le=20)  # m/s^2


class RobotStart(_Frozen):
    pos: tuple[Coord, Coord, Annotated[float, Field(allow_inf_nan=False, gt=0, le=0.6)]] = (-0.25, 0.0, 0.25)  # gripper site at reset, metres
    yaw: Yaw = 0.0
    grip: float = Field(1.0, ge=0, le=1)  # 1 = open, 0 = closed


class Provenance(_Frozen):
    program: str = "manual"  # name or id of the program that made the scene
    split: str | None = None  # split this scene belongs to, if any
    operators: tuple[str, ...] = ()  # operators applied, in order, e.g. ("base:pick_place", "move:obj0->far_left")
    parent: str | None = None  # spec_id of the scene it was derived from
    factors: tuple[str, ...] = ()  # scene factors this scene varies (e.g. "position:obj0", "instruction")


class ScenarioSpec(_Frozen):
    """One scene: objects, fixtures, instruction, goal, physics, start pose, seed, provenance."""

    schema_version: int = SCHEMA_VERSION
    family: Family
    objects: tuple[ObjectSpec, ...]
    containers: tuple[ContainerSpec, ...] = ()
    drawers: tuple[DrawerSpec, ...] = ()
    regions: tuple[RegionSpec, ...] = ()
    instruction: str = Field(min_length=1)
    goal: tuple[GoalPredicate, ...] = Field(min_length=1)
    physics: PhysicsSpec = Field(default_factory=PhysicsSpec)
    robot: RobotStart = Field(default_factory=RobotStart)
    seed: int = 0
    provenance: Provenance = Field(default_factory=Provenance)

    @field_validator("instruction")
    @classmethod
    def _printable(cls, v: str) -> str:
        bad = outside_charset(v)
        if bad:
            raise ValueError(f"has characters outside letters, digits, punctuation and space: {bad[:8]}")
        return v

    @field_validator("schema_version")
    @classmethod
    def _not_newer(cls, v: int) -> int:
        if v > SCHEMA_VERSION:
            raise ValueError(f"schema_version {v} is newer than this CoDA reads ({SCHEMA_VERSION})")
        return v

    @model_validator(mode="after")
    def _names_and_refs(self) -> "ScenarioSpec":
        names = [e.name for e in (*self.objects, *self.containers, *self.drawers, *self.regions)]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate entity names {sorted(dup)}")
        known = set(names)
        for g in self.goal:
            for a in g.args:
                if a not in known:
                    raise ValueError(f"goal {g.name}{tuple(g.args)} names unknown entity '{a}'")
        objs = {o.name for o in self.objects}
        for o in self.objects:
            if o.on is not None and (o.on not in objs or o.on == o.name):
                raise ValueError(f"object '{o.name}' starts on unknown object '{o.on}'")
        return self

    # ---- identity and serialisation -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The scene as plain JSON data (what `from_dict` reads back), as every backend's scene gives it."""
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace): equal specs give equal strings."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "ScenarioSpec":
        """Parse and validate. Raises SpecError / SchemaVersionError with the field and value."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"scenario JSON is malformed: {e.msg} at line {e.lineno} column {e.colno}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> "ScenarioSpec":
        if not isinstance(data, dict):
            raise SpecError(f"scenario must be a JSON object, got {type(data).__name__}")
        v = data.get("schema_version", SCHEMA_VERSION)
        if isinstance(v, int) and v > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"scenario field 'schema_version' = {v} is newer than this CoDA reads ({SCHEMA_VERSION}); upgrade coda"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise SpecError(format_validation_error("scenario", e)) from None

    @property
    def spec_id(self) -> str:
        """Content hash (16 hex chars) of the canonical JSON: the scene's identity."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    # ---- lookups ---------------------------------------------------------------------------------

    def entity(self, name: str) -> ObjectSpec | ContainerSpec | DrawerSpec | RegionSpec:
        for e in (*self.objects, *self.containers, *self.drawers, *self.regions):
            if e.name == name:
                return e
        raise KeyError(f"no entity named '{name}' in scenario (have {[e.name for e in self.objects]})")

    def object(self, name: str) -> ObjectSpec:
        for o in self.objects:
            if o.name == name:
                return o
        raise KeyError(f"no object named '{name}' in scenario (objects: {[o.name for o in self.objects]})")

    def replace(self, **changes: Any) -> "ScenarioSpec":
        """A validated copy with top-level fields changed."""
        data = self.model_dump()
        data.update({k: (v.model_dump() if isinstance(v, BaseModel) else v) for k, v in changes.items()})
        return ScenarioSpec.from_dict(_plain(data))


def entity_kinds(spec: ScenarioSpec) -> dict[str, str]:
    """Entity name → "object" | "container" | "drawer" | "region"."""
    kinds = ((ObjectSpec, "object"), (ContainerSpec, "container"), (DrawerSpec, "drawer"))
    return {e.name: next((k for t, k in kinds if isinstance(e, t)), "region")
            for e in (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)}


def entity_xy(spec: ScenarioSpec, name: str) -> tuple[float, float]:
    """Where an entity sits on the table: an object's, container's or drawer's `pos`, a region's centre."""
    e = spec.entity(name)
    return e.center if isinstance(e, RegionSpec) else e.pos


def _plain(x: Any) -> Any:
    if isinstance(x, BaseModel):
        return x.model_dump()
    if isinstance(x, (list, tuple)):
        return [_plain(i) for i in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def format_validation_error(what: str, err: ValidationError) -> str:
    """One line: `scenario field 'objects.0.color' = 'mauve': colour 'mauve' is not in the palette [...]`."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            parts.append(f"{what} field '{loc}' is missing")
        elif e["type"] == "extra_forbidden":
            parts.append(f"{what} field '{loc}' is not a known field")
        elif not loc:  # a rule over several fields: the message names them
            parts.append(f"{what}: {msg}")
        else:
            val = e.get("input")
            shown = "" if isinstance(val, (dict, list)) else f" = {short_repr(val)}"
            parts.append(f"{what} field '{loc}'{shown}: {msg[:300]}")
    return "; ".join(parts[:10])[:2000]


