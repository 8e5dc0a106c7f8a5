"""Named table regions, entity footprints and a seeded placement sampler.

A region is an axis-aligned rectangle of allowed *centre* positions on the table (metres, table frame:
x away from the robot, y to the left). The 3 x 3 grid (`near_right` ... `far_left`) tiles the usable table;
`table` is all of it; the `spot_*` regions are 6 cm squares at the grid centres, and the `band_*` regions
are thin strips — narrow layouts for training splits that a policy can memorise.

Footprints are oriented rectangles (centre, half extents, yaw) taken from the scene geometry
(`coda.scene.geometry`, one source for every dimension); two footprints conflict when they come
closer than a clearance. Every entity must also keep its whole footprint `TABLE_MARGIN` inside the
workspace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coda.errors import CodaError
from coda.scene import geometry as G
from coda.scene.spec import WORKSPACE, ContainerSpec, DrawerSpec, ObjectSpec, RegionSpec

TABLE_MARGIN = 0.02  # every footprint stays this far inside the workspace edge, metres
FLAT_CLEARANCE = 0.01  # gap kept to drawn (flat) regions, metres


class PlacementError(CodaError):
    """A placement sampler ran out of tries: `cannot place 'obj0' in region 'far_left' after 500 tries`."""


class RegionError(CodaError, KeyError):
    """An unknown region name; the message lists the regions that exist."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it a plain line
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Rect:
    """Axis-aligned rectangle of allowed centre positions: [x_min, x_max] x [y_min, y_max]."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float

    def contains(self, x: float, y: float, tol: float = 1e-9) -> bool:
        """True if (x, y) lies inside the rectangle (borders included)."""
        return self.x_min - tol <= x <= self.x_max + tol and self.y_min - tol <= y <= self.y_max + tol

    @property
    def center(self) -> tuple[float, float]:
        return ((self.x_min + self.x_max) / 2, (self.y_min + self.y_max) / 2)

    def sample(self, rng: np.random.Generator) -> tuple[float, float]:
        """A uniform point of the rectangle."""
        return (float(rng.uniform(self.x_min, self.x_max)), float(rng.uniform(self.y_min, self.y_max)))

    def overlaps(self, other: "Rect") -> bool:
        """True if the two rectangles share interior area."""
        return not (
            self.x_max <= other.x_min
            or other.x_max <= self.x_min
            or self.y_max <= other.y_min
            or other.y_max <= self.y_min
        )


_X = {"near": (-0.22, -0.10), "mid": (-0.08, 0.08), "far": (0.10, 0.22)}
_Y = {"right": (-0.22, -0.10), "mid": (-0.08, 0.08), "left": (0.10, 0.22)}


def _grid() -> dict[str, Rect]:
    out = {}
    for xn, (x0, x1) in _X.items():
        for yn, (y0, y1) in _Y.items():
            name = "_".join(p for p in (xn, yn) if p != "mid") or "center"
            out[name] = Rect(x0, x1, y0, y1)
    return out


def _spot(r: Rect, half: float = 0.03) -> Rect:
    cx, cy = r.center
    return Rect(round(cx - half, 4), round(cx + half, 4), round(cy - half, 4), round(cy + half, 4))


GRID_REGIONS: dict[str, Rect] = _grid()  # near_right, near, near_left, right, center, left, far_right, far, far_left
REGIONS: dict[str, Rect] = {
    **GRID_REGIONS,
    "table": Rect(-0.22, 0.22, -0.22, 0.22),
    **{f"spot_{k}": _spot(v) for k, v in GRID_REGIONS.items()},
    "band_mid_right": Rect(-0.02, 0.02, -0.20, 0.06),  # mid-depth strip right of the left spot
    "band_mid": Rect(-0.02, 0.02, -0.20, 0.20),  # mid-depth strip across the table
    "band_near": Rect(-0.19, -0.13, -0.20, 0.20),  # strip close to the robot
    "band_far": Rect(0.13, 0.19, -0.20, 0.20),  # strip far from the robot
}


def region(name: str) -> Rect:
    """The rectangle of a named region. Raises RegionError listing the regions that exist."""
    try:
        return REGIONS[name]
    except KeyError:
        raise RegionError(f"Unknown region '{name}'. Available: {sorted(REGIONS)}") from None


def grid_region_of(x: float, y: float) -> str:
    """The name of the 3 x 3 grid cell nearest to (x, y): a coarse word for where something is."""
    xn = "near" if x < -0.075 else ("far" if x > 0.075 else "mid")
    yn = "right" if y < -0.075 else ("left" if y > 0.075 else "mid")
    return "_".join(p for p in (xn, yn) if p != "mid") or "center"


# ---- footprints ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Footprint:
    """An oriented rectangle on the table: centre (cx, cy), half extents (hx, hy), rotation yaw (rad).

    `flat` marks a drawn region: nothing needs finger room around it, so it keeps only `FLAT_CLEARANCE`.
    """

    cx: float
    cy: float
    hx: float
    hy: float
    yaw: float = 0.0
    flat: bool = False

    def corners(self) -> np.ndarray:
        """The four corners, shape (4, 2)."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]], dtype=float) * (self.hx, self.hy)
        rot = np.array([[c, -s], [s, c]])
        return local @ rot.T + (self.cx, self.cy)

    def bounds(self) -> Rect:
        """The axis-aligned bounding rectangle."""
        p = self.corners()
        return Rect(float(p[:, 0].min()), float(p[:, 0].max()), float(p[:, 1].min()), float(p[:, 1].max()))

    def moved(self, cx: float, cy: float) -> "Footprint":
        return Footprint(cx, cy, self.hx, self.hy, self.yaw, self.flat)

    def conflicts(self, other: "Footprint", clearance: float = 0.0) -> bool:
        """True if the rectangles come closer than `clearance` (separating-axis test on inflated shapes)."""
        if self.flat or other.flat:
            clearance = min(clearance, FLAT_CLEARANCE)
        c = clearance / 2
        ax, ay, bx, by = self.hx + c, self.hy + c, other.hx + c, other.hy + c
        dx, dy = other.cx - self.cx, other.cy - self.cy
        if math.hypot(dx, dy) > math.hypot(ax, ay) + math.hypot(bx, by):  # far apart: skip the exact test
            return False
        ca, sa, cb, sb = math.cos(self.yaw), math.sin(self.yaw), math.cos(other.yaw), math.sin(other.yaw)
        # Separating-axis test: the four edge normals of the two rectangles.
        for ux, uy in ((ca, sa), (-sa, ca), (cb, sb), (-sb, cb)):
            ra = ax * abs(ca * ux + sa * uy) + ay * abs(-sa * ux + ca * uy)
            rb = bx * abs(cb * ux + sb * uy) + by * abs(-sb * ux + cb * uy)
            if abs(dx * ux + dy * uy) >= ra + rb:
                return False
        return True


def inside_table(fp: Footprint, margin: float = TABLE_MARGIN) -> bool:
    """True if the whole footprint lies `margin` inside the workspace."""
    b = fp.bounds()
    x0, x1, y0, y1 = WORKSPACE
    return b.x_min >= x0 + margin and b.x_max <= x1 - margin and b.y_min >= y0 + margin and b.y_max <= y1 - margin


Entity = ObjectSpec | ContainerSpec | DrawerSpec | RegionSpec


def footprint(entity: Entity, pos: tuple[float, float] | None = None) -> Footprint:
    """The table area an entity covers, from the simulator's own geometry (a drawer's includes its fully
    opened drawer and handle), at its position or with its position replaced by `pos`."""
    if pos is not None:
        entity = entity.model_copy(update={"center" if isinstance(entity, RegionSpec) else "pos": pos})
    g = G.footprint(entity)
    return Footprint(g.cx, g.cy, g.hx, g.hy, g.yaw, isinstance(entity, RegionSpec))


def place(
    rng: np.random.Generator,
    name: str,
    region_name: str,
    entity: Entity,
    occupied: list[Footprint],
    *,
    clearance: float = 0.03,
    max_tries: int = 500,
) -> tuple[float, float]:
    """Sample a centre position for `entity` in a region, clear of every footprint in `occupied`.

    Args:
        rng: the only source of randomness (same state -> same position).
        name: the entity's name, for the error message.
        region_name: a key of REGIONS; the entity's position is drawn uniformly inside it.
        entity: the entity to place (its own position is ignored; its size, yaw and kind give the footprint).
        occupied: footprints already on the table.
        clearance: minimum gap to every occupied footprint, metres.
        max_tries: rejection-sampling budget.

    Returns:
        (x, y) such that the footprint is inside the table and clear of `occupied`.

    Raises:
        RegionError: unknown region. PlacementError: no valid position after `max_tries` draws.
    """
    rect = region(region_name)
    fp0 = footprint(entity, (0.0, 0.0))  # shifted per draw: cheaper than rebuilding the entity
    for _ in range(max_tries):
        x, y = rect.sample(rng)
        fp = fp0.moved(fp0.cx + x, fp0.cy + y)
        if inside_table(fp) and not any(fp.conflicts(o, clearance) for o in occupied):
            return (round(x, 4), round(y, 4))
    raise PlacementError(f"cannot place '{name}' in region '{region_name}' after {max_tries} tries")
