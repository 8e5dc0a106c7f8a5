"""Fixed dimensions of the tabletop scene and pure geometry over spec entities (no MuJoCo import).

Everything here is plain arithmetic on `ScenarioSpec` entities, so scene generators can use the same
numbers as the simulator (footprints for placement, the gripper's maximum opening, reachable box) without
building a model.

Frame: metres, the table top is z = 0, x away from the robot, y to the left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coda.scene.spec import WORKSPACE, ContainerSpec, DrawerSpec, ObjectSpec, RegionSpec

Entity = ObjectSpec | ContainerSpec | DrawerSpec | RegionSpec  # anything a scene places on the table

# ---- table ---------------------------------------------------------------------------------------
TABLE_HALF = (0.50, 0.50, 0.025)  # half extents of the table slab; its top face is z = 0

# ---- gripper (TCP = point between the fingertips, the origin of the hand body) --------------------
FINGER_RANGE = (0.0, 0.04)  # each finger's inner-face offset from the jaw centre line, m
FINGER_CTRL = (-0.01, 0.04)  # finger target for grip 0 (closed, squeezing) and grip 1 (open), m
MAX_OPENING = 2 * FINGER_RANGE[1]  # widest gap between the finger pads, m
FINGER_HALF = (0.010, 0.006, 0.030)  # finger box half extents (hand x, hand y = closing axis, z), m
FINGER_Z = 0.025  # finger box centre above the TCP: pads span z in [-0.005, 0.055]
FINGERTIP_BELOW_TCP = FINGER_Z - FINGER_HALF[2]  # -0.005: the pads reach 5 mm below the TCP
PALM_HALF = (0.020, 0.055, 0.010)  # palm box half extents, m
PALM_Z = 0.065  # palm centre above the TCP: its underside is 55 mm above the TCP

# Action box: absolute TCP targets are clipped to it (x, y follow the workspace).
ACTION_LOW = (WORKSPACE[0], WORKSPACE[2], 0.005, -math.pi / 2, 0.0)
ACTION_HIGH = (WORKSPACE[1], WORKSPACE[3], 0.40, math.pi / 2, 1.0)

# ---- containers -----------------------------------------------------------------------------------
CONTAINER_FLOOR = 0.008  # thickness of a container's floor; objects inside rest at this height
CONTAINER_WALL = 0.008  # wall thickness
BOWL_SEGMENTS = 12  # wall boxes approximating a bowl's ring

# ---- drawers --------------------------------------------------------------------------------------
CABINET_HALF_Y = 0.12  # half width of a cabinet, m
CABINET_HALF_Z = 0.06  # half height of a cabinet (it stands 0.12 m tall)
CABINET_WALL = 0.012  # wall thickness (thick enough that the pushed jaws do not tunnel through)
HANDLE_STANDOFF = 0.045  # handle bar centre in front of the drawer's front face, m
HANDLE_Z = 0.08  # handle bar height above the table, m
HANDLE_HALF = (0.008, 0.045, 0.008)  # handle bar half extents in the cabinet frame, m


def object_half_height(obj: ObjectSpec) -> float:
    """Vertical half extent of an upright object (box/cylinder: size z; sphere: radius)."""
    return obj.size[0] if obj.shape == "sphere" else obj.size[2]


def object_half_xy(obj: ObjectSpec) -> tuple[float, float]:
    """Horizontal half extents in the object's own frame (cylinder and sphere use the radius)."""
    if obj.shape == "box":
        return obj.size[0], obj.size[1]
    return obj.size[0], obj.size[0]


def min_horizontal_width(obj: ObjectSpec) -> float:
    """Narrowest horizontal width (m): what the jaws must span to grasp the object upright."""
    return 2.0 * min(object_half_xy(obj))


def graspable(obj: ObjectSpec) -> bool:
    """True when the object's narrowest horizontal width fits between the open fingers with 1 cm to spare."""
    return min_horizontal_width(obj) <= MAX_OPENING - 0.01


def cabinet_half_x(drawer: DrawerSpec) -> float:
    """Half depth of a drawer's cabinet: deep enough that the drawer stays in its runners at full travel."""
    return max(0.10, 0.5 * drawer.travel + 0.03)


def rotate(yaw: float, x: float, y: float) -> tuple[float, float]:
    """Rotate the planar vector (x, y) by `yaw` radians."""
    c, s = math.cos(yaw), math.sin(yaw)
    return c * x - s * y, s * x + c * y


def drawer_axis(drawer: DrawerSpec) -> tuple[float, float]:
    """Unit vector (world x, y) along which the drawer opens (towards -x for yaw 0)."""
    return rotate(drawer.yaw, -1.0, 0.0)


def handle_position(drawer: DrawerSpec, fraction: float) -> tuple[float, float, float]:
    """World position of the handle bar's centre with the drawer open by `fraction` of its travel."""
    hx, hy = rotate(drawer.yaw, -cabinet_half_x(drawer) - HANDLE_STANDOFF - fraction * drawer.travel, 0.0)
    return drawer.pos[0] + hx, drawer.pos[1] + hy, HANDLE_Z


@dataclass(frozen=True)
class Footprint:
    """An oriented rectangle on the table: centre, half extents in its own frame, yaw, and height."""

    cx: float
    cy: float
    hx: float
    hy: float
    yaw: float
    top: float  # highest point above the table, m

    def corners(self) -> list[tuple[float, float]]:
        """The four corners in world coordinates."""
        out = []
        for sx, sy in ((1, 1), (1, -1), (-1, -1), (-1, 1)):
            dx, dy = rotate(self.yaw, sx * self.hx, sy * self.hy)
            out.append((self.cx + dx, self.cy + dy))
        return out

    def radius(self) -> float:
        """Radius of the circle around the centre that covers the footprint."""
        return math.hypot(self.hx, self.hy)


def footprint(entity: Entity) -> Footprint:
    """The table area an entity covers (a drawer's includes its fully opened drawer and handle).

    Objects stacked `on` another report the height of their own extent only (placement is the caller's).
    """
    if isinstance(entity, ObjectSpec):
        hx, hy = object_half_xy(entity)
        return Footprint(entity.pos[0], entity.pos[1], hx, hy, entity.yaw, 2 * object_half_height(entity))
    if isinstance(entity, ContainerSpec):
        w = CONTAINER_WALL
        top = CONTAINER_FLOOR + 2 * entity.size[2]
        return Footprint(entity.pos[0], entity.pos[1], entity.size[0] + w, entity.size[1] + w, entity.yaw, top)
    if isinstance(entity, DrawerSpec):
        hx = cabinet_half_x(entity)
        reach = HANDLE_STANDOFF + HANDLE_HALF[0] + entity.travel  # space in front the open drawer needs
        half = hx + reach / 2
        cx, cy = rotate(entity.yaw, -reach / 2, 0.0)
        return Footprint(entity.pos[0] + cx, entity.pos[1] + cy, half, CABINET_HALF_Y, entity.yaw, 2 * CABINET_HALF_Z)
    return Footprint(entity.center[0], entity.center[1], entity.half[0], entity.half[1], 0.0, 0.0)
