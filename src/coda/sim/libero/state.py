"""Privileged state of a LIBERO episode: entity poses and extents, end effector, gripper, contacts, and the
articulated parts (drawers, stove knobs) BDDL `open` / `close` / `turnon` / `turnoff` goals refer to.

Entities are the BDDL objects (in BDDL order) followed by the fixtures other than tables and floors
(cabinets, stoves, racks...). Poses come straight from MuJoCo's body frames; extents are the world-axis
bounding boxes of each entity's collision geoms (LIBERO's `horizontal_radius` / `top_offset` are
placeholders, identical for most objects).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

_SIGNS = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)  # (8, 3)

# Words for categories whose name is not what an instruction calls them.
CATEGORY_WORDS = {
    "akita_black_bowl": "black bowl",
    "glazed_rim_porcelain_ramekin": "ramekin",
    "flat_stove": "stove",
    "chefmate_8_frypan": "frying pan",
    "new_salad_dressing": "salad dressing",
    "bbq_sauce": "bbq sauce",
    "libero_mug_yellow": "yellow mug",
    "libero_mug_green": "green mug",
}
SKIPPED_FIXTURES = ("table", "floor")  # fixture categories containing these words are not entities


def category_words(category: str) -> str:
    """A category in words: "alphabet_soup" -> "alphabet soup", "akita_black_bowl" -> "black bowl"."""
    return CATEGORY_WORDS.get(category, " ".join(w for w in category.split("_") if w))


@dataclass(frozen=True, eq=False)
class Part:
    """An articulated part of a fixture (a drawer, a stove knob) as it is now."""

    joint: str  # MuJoCo joint name
    kind: str  # "slide" or "hinge"
    qpos: float  # joint position (m or rad)
    pos: np.ndarray  # (3,) the part body's origin (world, m); a knob's pivot
    axis: np.ndarray  # (3,) the joint axis (world, unit)
    opening: float  # +1 or -1: the sign of the joint motion that opens the part (or turns it on)
    handle: np.ndarray  # (3,) centre of the part's collision geom furthest along the opening motion (a drawer's handle; a knob's pivot)
    lo: np.ndarray  # (3,) lower corner of the part's collision geoms' world bounding box
    hi: np.ndarray  # (3,) upper corner
    open_at: float  # joint position from which LIBERO counts the part open (or on)

    @property
    def open_dir(self) -> np.ndarray:
        """World direction in which a sliding part moves when opened."""
        return self.opening * self.axis

    @property
    def is_open(self) -> bool:
        """Whether LIBERO counts the part open (a drawer) or on (a knob)."""
        return self.opening * (self.qpos - self.open_at) >= 0.0


@dataclass(frozen=True, eq=False)
class LiberoState:
    """The state after a step; arrays are fresh copies (N = number of entities)."""

    names: tuple[str, ...]  # entity instance names, e.g. ("alphabet_soup_1", "basket_1", ...)
    texts: tuple[str, ...]  # entities in words, e.g. ("alphabet soup", "basket", ...)
    fixture: np.ndarray  # (N,) bool, True for fixtures (cabinets, stoves...)
    body_pos: np.ndarray  # (N, 3) root body positions (world, m)
    rot: np.ndarray  # (N, 3, 3) root body orientations (columns: the body's axes in the world)
    center: np.ndarray  # (N, 3) centres of the collision bounding boxes (world, m)
    half: np.ndarray  # (N, 3) half extents of the collision bounding boxes (world axes, m)
    local_lo: np.ndarray  # (N, 3) lower corner of each entity's collision box in its own body frame (m)
    local_hi: np.ndarray  # (N, 3) upper corner of that box
    eef_pos: np.ndarray  # (3,) grip site position (world, m)
    eef_rot: np.ndarray  # (3, 3) grip site orientation
    eef_vel: np.ndarray  # (3,) grip site linear velocity (m/s)
    gripper_qpos: np.ndarray  # (2,) finger joint positions (m)
    grip_cmd: float  # last gripper command in LIBERO units (-1 open .. +1 close)
    left_touch: frozenset[str]  # entities the left finger touches
    right_touch: frozenset[str]  # entities the right finger touches
    success: bool  # the BDDL goal holds (`check_success()`)
    steps: int  # control steps since the episode started
    parts: dict[str, Part] = field(default_factory=dict)  # BDDL name (a region like "wooden_cabinet_1_top_region", or a fixture like "flat_stove_1") -> its part

    @property
    def index(self) -> dict[str, int]:
        """Entity name -> row."""
        return {n: i for i, n in enumerate(self.names)}

    @property
    def gripper_width(self) -> float:
        """Distance between the fingers (m); about 0.08 fully open."""
        return float(self.gripper_qpos[0] - self.gripper_qpos[1])

    @property
    def eef_yaw(self) -> float:
        """Heading of the grip site's x axis about the world z axis (rad)."""
        return math.atan2(float(self.eef_rot[1, 0]), float(self.eef_rot[0, 0]))

    @property
    def grasped(self) -> frozenset[str]:
        """Entities touched by both fingers."""
        return self.left_touch & self.right_touch

    def pos(self, name: str) -> np.ndarray:
        """Root body position of entity `name` (KeyError names the entity and the known ones)."""
        try:
            return self.body_pos[self.names.index(name)]
        except ValueError:
            raise KeyError(f"entity '{name}' is not in this scene; entities: {list(self.names)}") from None

    def top(self, name: str) -> float:
        """Highest point of entity `name`'s collision bounding box (world z, m)."""
        i = self.names.index(name)
        return float(self.center[i, 2] + self.half[i, 2])


class StateReader:
    """Reads `LiberoState`s of one compiled LIBERO scene (ids are resolved once per model)."""

    def __init__(self, env: Any) -> None:
        """`env` is the LIBERO problem environment (`ControlEnv.env`)."""
        self._env = env
        m = env.sim.model._model
        self.model = m
        names, cats, fixture = [], [], []
        for name, obj in env.objects_dict.items():
            names.append(name)
            cats.append(obj.category_name)
            fixture.append(False)
        for name, obj in env.fixtures_dict.items():
            if any(w in obj.category_name for w in SKIPPED_FIXTURES):
                continue
            names.append(name)
            cats.append(obj.category_name)
            fixture.append(True)
        self.names = tuple(names)
        self.categories = tuple(cats)
        self.texts = tuple(category_words(c) for c in cats)
        self.fixture = np.array(fixture, dtype=bool)
        self.body_ids = np.array([env.obj_body_id[n] for n in names], dtype=np.int64)
        # body -> entity row (or -1), by walking up the kinematic tree to an entity root
        root_row = {int(b): i for i, b in enumerate(self.body_ids)}
        body_row = np.full(m.nbody, -1, dtype=np.int64)
        for b in range(m.nbody):
            a = b
            while a > 0 and a not in root_row:
                a = int(m.body_parentid[a])
            body_row[b] = root_row.get(a, -1)
        self.geom_row = body_row[m.geom_bodyid]
        collide = (m.geom_contype != 0) | (m.geom_conaffinity != 0)
        geoms = np.flatnonzero(collide & (self.geom_row >= 0))
        order = np.argsort(self.geom_row[geoms], kind="stable")
        self._box_geoms = geoms[order]
        rows = self.geom_row[self._box_geoms]
        # geoms of entity i are self._box_geoms[start[i]:end[i]] (entities without any keep a zero box)
        self._box_slices = list(zip(np.searchsorted(rows, np.arange(len(names))).tolist(),
                                    np.searchsorted(rows, np.arange(len(names)), side="right").tolist()))
        gripper = env.robots[0].gripper
        self._left = self._geom_ids(gripper.important_geoms["left_finger"])
        self._right = self._geom_ids(gripper.important_geoms["right_finger"])
        robot = env.robots[0]
        self._eef_site = int(robot.eef_site_id)
        self._finger_qpos = np.array(robot._ref_gripper_joint_pos_indexes, dtype=np.int64)
        self._local: tuple[np.ndarray, np.ndarray] | None = None  # body-frame boxes (rigid: computed once)
        self._parts = self._find_parts(env)

    def _find_parts(self, env: Any) -> list[tuple[str, str, int, int, float, float, np.ndarray]]:
        """(BDDL name, joint, joint id, body id, opening sign, open threshold, collision geoms) of every
        articulated part: sites with their own joint (drawer regions), and fixtures turned on and off by a
        joint (stove knobs)."""
        m = self.model
        named: list[tuple[str, str, str]] = []  # (BDDL name, joint, parent object)
        for name, site in env.object_sites_dict.items():
            for joint in getattr(site, "joints", None) or []:
                named.append((name, joint, site.parent_name))
        for name, obj in env.fixtures_dict.items():
            if (obj.object_properties.get("articulation") or {}).get("default_turnon_ranges"):
                named.extend((name, joint, name) for joint in obj.joints)
        parts = []
        for name, joint, parent in named:
            j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, joint)
            if j < 0:
                continue
            ranges = env.get_object(parent).object_properties["articulation"]
            on = ranges.get("default_turnon_ranges") or ranges.get("default_open_ranges") or [0.0]
            off = ranges.get("default_turnoff_ranges") or ranges.get("default_close_ranges") or [0.0]
            opening = 1.0 if np.mean(on) >= np.mean(off) else -1.0
            open_at = float(min(on) if opening > 0 else max(on))
            body = int(m.jnt_bodyid[j])
            geoms = np.flatnonzero((m.geom_bodyid == body) & ((m.geom_contype != 0) | (m.geom_conaffinity != 0)))
            parts.append((name, joint, j, body, opening, open_at, geoms))
        return parts

    def parts(self, d: mujoco.MjData) -> dict[str, Part]:
        """The articulated parts as they are now."""
        m, out = self.model, {}
        for name, joint, j, body, opening, open_at, geoms in self._parts:
            axis = d.xaxis[j].copy()
            slide = int(m.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_SLIDE)
            pos = d.xpos[body].copy()
            if len(geoms):
                xmat = d.geom_xmat[geoms].reshape(-1, 3, 3)
                centre = d.geom_xpos[geoms] + np.einsum("gij,gj->gi", xmat, m.geom_aabb[geoms, :3])
                ext = np.einsum("gij,gj->gi", np.abs(xmat), m.geom_aabb[geoms, 3:])
                lo, hi = (centre - ext).min(axis=0), (centre + ext).max(axis=0)
                handle = centre[int(np.argmax(centre @ (opening * axis)))].copy() if slide else pos
            else:
                lo = hi = handle = pos
            out[name] = Part(joint=joint, kind="slide" if slide else "hinge", qpos=float(d.qpos[m.jnt_qposadr[j]]),
                             pos=pos, axis=axis, opening=opening, handle=handle, lo=lo, hi=hi, open_at=open_at)
        return out

    def _geom_ids(self, names: list[str]) -> np.ndarray:
        return np.array([mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, n) for n in names], dtype=np.int64)

    def boxes(self, d: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """(centre (N, 3), half extents (N, 3)) of the entities' world bounding boxes; an entity without
        collision geoms gets a zero-size box at its origin."""
        g = self._box_geoms
        center, half = d.xpos[self.body_ids].copy(), np.zeros((len(self.names), 3))
        if not len(g):
            return center, half
        aabb = self.model.geom_aabb[g]  # (G, 6): centre, half size in the geom frame
        local = aabb[:, None, :3] + _SIGNS[None] * aabb[:, None, 3:]  # (G, 8, 3)
        xmat = d.geom_xmat[g].reshape(-1, 3, 3)
        corners = np.einsum("gij,gkj->gki", xmat, local) + d.geom_xpos[g][:, None, :]
        lo_g, hi_g = corners.min(axis=1), corners.max(axis=1)
        for i, (s, e) in enumerate(self._box_slices):
            if e > s:
                lo, hi = lo_g[s:e].min(axis=0), hi_g[s:e].max(axis=0)
                center[i], half[i] = (lo + hi) / 2, (hi - lo) / 2
        if self._local is None:
            self._local = self._local_boxes(d, corners)
        return center, half

    def _local_boxes(self, d: mujoco.MjData, corners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each entity's collision box in its own body frame, from the world corners (G, 8, 3)."""
        n = len(self.names)
        lo, hi = np.zeros((n, 3)), np.zeros((n, 3))
        rows = self.geom_row[self._box_geoms]
        pos = d.xpos[self.body_ids][rows]  # (G, 3) the owning entity's origin
        rot = d.xmat[self.body_ids].reshape(-1, 3, 3)[rows]  # (G, 3, 3)
        local = np.einsum("gji,gkj->gki", rot, corners - pos[:, None, :])  # R^T (corner - origin)
        for i, (s, e) in enumerate(self._box_slices):
            if e > s:
                lo[i], hi[i] = local[s:e].min(axis=(0, 1)), local[s:e].max(axis=(0, 1))
        return lo, hi

    def contacts(self, d: mujoco.MjData) -> tuple[frozenset[str], frozenset[str]]:
        """Entities touched by the left and by the right finger."""
        left: set[str] = set()
        right: set[str] = set()
        if d.ncon:
            pairs = d.contact.geom[: d.ncon]
            for finger, out in ((self._left, left), (self._right, right)):
                for col, other in ((0, 1), (1, 0)):
                    hit = np.isin(pairs[:, col], finger)
                    if hit.any():
                        rows = self.geom_row[pairs[hit, other]]
                        out.update(self.names[r] for r in rows.tolist() if r >= 0)
        return frozenset(left), frozenset(right)

    def read(self, grip_cmd: float, success: bool, steps: int) -> LiberoState:
        """The state of the scene now."""
        d = self._env.sim.data._data
        center, half = self.boxes(d)
        assert self._local is not None or not len(self._box_geoms)
        local_lo, local_hi = self._local if self._local is not None else (np.zeros((len(self.names), 3)),) * 2
        left, right = self.contacts(d)
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(self.model, d, mujoco.mjtObj.mjOBJ_SITE, self._eef_site, vel, 0)
        return LiberoState(
            names=self.names,
            texts=self.texts,
            fixture=self.fixture,
            body_pos=d.xpos[self.body_ids].copy(),
            rot=d.xmat[self.body_ids].reshape(-1, 3, 3).copy(),
            center=center,
            half=half,
            local_lo=local_lo,
            local_hi=local_hi,
            eef_pos=d.site_xpos[self._eef_site].copy(),
            eef_rot=d.site_xmat[self._eef_site].reshape(3, 3).copy(),
            eef_vel=vel[3:].copy(),
            gripper_qpos=d.qpos[self._finger_qpos].copy(),
            grip_cmd=float(grip_cmd),
            left_touch=left,
            right_touch=right,
            success=bool(success),
            steps=steps,
            parts=self.parts(d),
        )
