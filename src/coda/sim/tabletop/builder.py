"""Build a MuJoCo model of a `ScenarioSpec` with `mujoco.MjSpec` (no XML templates).

The scene: a table slab whose top face is z = 0; a floating parallel-jaw gripper (slide x/y/z + yaw
hinge + two finger slides, position actuators, gravity compensation); free primitive objects; static
containers (tray: floor + 4 walls; bowl: floor + a ring of wall boxes); drawers (a cabinet fixed to the
table and a drawer on a slide joint with a handle facing the robot); visual-only region markers; cameras
"front" and "wrist". Physics: `SimConfig.physics_dt` (2 ms), implicitfast, elliptic cones, impratio 10.

Friction: every object geom has contact priority over the table, containers and fingers, so its own
friction (spec friction x physics.friction_scale) governs all of its contacts; the physics axis therefore
changes sliding and grasping alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coda.sim.tabletop import _gl  # noqa: F401  (chooses the GL backend before mujoco is imported)

import mujoco  # noqa: E402

from coda.errors import CodaError  # noqa: E402
from coda.scene.spec import PALETTE, ContainerSpec, DrawerSpec, ObjectSpec, ScenarioSpec  # noqa: E402
from coda.sim.config import SimConfig  # noqa: E402
from coda.scene import geometry as G  # noqa: E402

KINDS = ("object", "container", "drawer", "region")
# One-hot type vocabulary of an entity (objects by shape, containers by kind).
TYPES = ("box", "cylinder", "sphere", "tray", "bowl", "drawer", "region")

_BOX = mujoco.mjtGeom.mjGEOM_BOX
_CYL = mujoco.mjtGeom.mjGEOM_CYLINDER
_SPHERE = mujoco.mjtGeom.mjGEOM_SPHERE

XYZ_KP, YAW_KP, FINGER_KP = 3000.0, 100.0, 600.0  # position-actuator gains
XYZ_FORCE, YAW_TORQUE, FINGER_FORCE = 50.0, 10.0, 25.0  # actuator force limits (N, N m, N)
HAND_MASS, FINGER_MASS = 1.0, 0.05  # kg
FINGER_DAMPING = 60.0  # finger slide damping (N s/m): jaws close at ~0.4 m/s instead of slamming into objects
OBJECT_SOLREF = (0.005, 1.0)  # stiffer than MuJoCo's default 20 ms so squeezed light objects barely sink


class BuildError(CodaError, ValueError):
    """A scenario cannot be turned into a MuJoCo model; the message names the entity and the value."""


@dataclass(frozen=True, eq=False)
class SceneIndex:
    """Where each entity and gripper quantity lives in the compiled model (rows follow spec order:
    objects, containers, drawers, regions)."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]  # per row, one of KINDS
    types: tuple[str, ...]  # per row, one of TYPES
    texts: tuple[str, ...]  # per row, the entity in words
    rgb: np.ndarray  # (N, 3) colour
    size: np.ndarray  # (N, 3) spec half extents (drawers: cabinet half extents)
    static_pos: np.ndarray  # (N, 3) pose of fixed rows (containers: floor centre; drawers: closed handle)
    static_rot: np.ndarray  # (N, 3, 3)
    obj_rows: np.ndarray  # (n_obj,) rows of objects
    obj_qpos: np.ndarray  # (n_obj,) qpos address of each object's free joint
    obj_qvel: np.ndarray  # (n_obj,) qvel address of each object's free joint
    obj_body: np.ndarray  # (n_obj,) body id of each object
    drawer_rows: np.ndarray  # (n_drw,) rows of drawers
    drawer_qpos: np.ndarray  # (n_drw,) qpos address of each drawer slide
    drawer_qvel: np.ndarray  # (n_drw,) qvel address of each drawer slide
    drawer_axis: np.ndarray  # (n_drw, 3) world direction a drawer opens along
    drawer_travel: np.ndarray  # (n_drw,) full travel, m
    grip_qpos: np.ndarray  # (6,) qpos addresses: x, y, z, yaw, left finger, right finger
    grip_qvel: np.ndarray  # (3,) qvel addresses of the x, y, z slides
    finger_geoms: tuple[int, int]  # left, right finger geom ids
    geom_entity: np.ndarray  # (ngeom,) index into contact_names of what a geom belongs to; -1 = robot
    contact_names: tuple[str, ...]  # entity names, then "table", then "<drawer>/cabinet" per drawer
    init_qpos: np.ndarray  # qpos at reset
    init_ctrl: np.ndarray  # ctrl at reset
    substeps: int  # physics steps per control step


@dataclass(frozen=True, eq=False)
class BuiltScene:
    """A compiled scene: the model, the spec it came from and the index into it."""

    spec: ScenarioSpec
    model: mujoco.MjModel
    index: SceneIndex


def substeps_for(config: SimConfig) -> int:
    """Physics steps per control step. Raises BuildError when the rates do not divide."""
    n = 1.0 / (config.control_hz * config.physics_dt)
    if abs(n - round(n)) > 1e-6 or round(n) < 1:
        raise BuildError(
            f"sim.control_hz ({config.control_hz}) x sim.physics_dt ({config.physics_dt}) must give a whole "
            f"number of physics steps per control step, got {n:.4f}"
        )
    return int(round(n))


def yaw_quat(yaw: float) -> list[float]:
    """Quaternion (w, x, y, z) of a rotation by `yaw` about z."""
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


def yaw_mat(yaw: float) -> np.ndarray:
    """3x3 rotation matrix of a rotation by `yaw` about z."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _look_at_quat(pos: np.ndarray, target: np.ndarray) -> list[float]:
    # MuJoCo cameras look along their -z axis with +y up.
    fwd = target - pos
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    mat = np.stack([right, up, -fwd], axis=1)
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, mat.flatten())
    return quat.tolist()


def _rgba(color: str, alpha: float = 1.0) -> list[float]:
    r, g, b, _ = PALETTE[color]
    return [r, g, b, alpha]


def entity_text(entity: object) -> str:
    """An entity in words: objects via coda.scene.language.describe, else "gray tray", "white drawer"..."""
    from coda.scene.language import describe

    if isinstance(entity, ObjectSpec):
        return describe(entity)
    if isinstance(entity, ContainerSpec):
        return f"{entity.color} {entity.kind}"
    if isinstance(entity, DrawerSpec):
        return f"{entity.color} drawer"
    return f"{entity.color} goal region"  # type: ignore[attr-defined]


def resting_heights(spec: ScenarioSpec) -> dict[str, float]:
    """Centre height of every object at rest: on the table, on a container's floor when its centre lies in
    the container, or on top of the object named by `on`. Raises BuildError on a stacking cycle."""
    objs = {o.name: o for o in spec.objects}
    z: dict[str, float] = {}

    def floor_under(o: ObjectSpec) -> float:
        for c in spec.containers:
            lx, ly = G.rotate(-c.yaw, o.pos[0] - c.pos[0], o.pos[1] - c.pos[1])
            if abs(lx) <= c.size[0] and abs(ly) <= c.size[1]:
                return G.CONTAINER_FLOOR
        return 0.0

    def height(name: str, chain: tuple[str, ...]) -> float:
        if name in z:
            return z[name]
        if name in chain:
            raise BuildError(f"objects {list(chain)} are stacked on each other in a cycle ('on' field)")
        o = objs[name]
        base = floor_under(o) if o.on is None else height(o.on, (*chain, name)) + G.object_half_height(objs[o.on])
        z[name] = base + G.object_half_height(o)
        return z[name]

    for name in objs:
        height(name, ())
    return z


def _add_object(wb: mujoco.MjsBody, o: ObjectSpec, z: float, spec: ScenarioSpec) -> None:
    body = wb.add_body(name=o.name, pos=[o.pos[0], o.pos[1], z], quat=yaw_quat(o.yaw))
    body.add_freejoint(name=f"{o.name}/free")
    geom = body.add_geom(name=f"{o.name}/geom", rgba=_rgba(o.color))
    if o.shape == "box":
        geom.type, geom.size = _BOX, list(o.size)
    elif o.shape == "cylinder":
        geom.type, geom.size = _CYL, [o.size[0], o.size[2], 0.0]
    else:
        geom.type, geom.size = _SPHERE, [o.size[0], 0.0, 0.0]
    geom.mass = o.mass * spec.physics.mass_scale
    mu = o.friction * spec.physics.friction_scale
    geom.friction = [mu, 0.005, 0.001]
    geom.priority = 1  # the object's friction governs its contacts (see module docstring)
    geom.solref = list(OBJECT_SOLREF)
    # Torsional friction steadies grasps; spheres also get rolling friction so a nudge does not roll forever.
    geom.condim = 6 if o.shape == "sphere" else 4


def _add_container(wb: mujoco.MjsBody, c: ContainerSpec) -> None:
    body = wb.add_body(name=c.name, pos=[c.pos[0], c.pos[1], 0.0], quat=yaw_quat(c.yaw))
    rgba = _rgba(c.color)
    w, fl = G.CONTAINER_WALL, G.CONTAINER_FLOOR
    sx, sy, sz = c.size
    wall_hz = (fl + 2 * sz) / 2
    if c.kind == "tray":
        body.add_geom(name=f"{c.name}/floor", type=_BOX, size=[sx + w, sy + w, fl / 2], pos=[0, 0, fl / 2], rgba=rgba)
        for i, (px, py, hx, hy) in enumerate(
            ((sx + w / 2, 0, w / 2, sy + w), (-sx - w / 2, 0, w / 2, sy + w), (0, sy + w / 2, sx, w / 2), (0, -sy - w / 2, sx, w / 2))
        ):
            body.add_geom(name=f"{c.name}/wall{i}", type=_BOX, size=[hx, hy, wall_hz], pos=[px, py, wall_hz], rgba=rgba)
        return
    body.add_geom(name=f"{c.name}/floor", type=_CYL, size=[max(sx, sy) + w, fl / 2, 0], pos=[0, 0, fl / 2], rgba=rgba)
    n = G.BOWL_SEGMENTS
    ax, ay = sx + w / 2, sy + w / 2
    seg = math.pi * max(ax, ay) / n * 1.15  # half length: neighbouring segments overlap slightly
    for k in range(n):
        th = 2 * math.pi * k / n
        normal = math.atan2(ax * math.sin(th), ay * math.cos(th))  # outward normal of the ellipse at th
        body.add_geom(
            name=f"{c.name}/wall{k}", type=_BOX, size=[w / 2, seg, wall_hz],
            pos=[ax * math.cos(th), ay * math.sin(th), wall_hz], quat=yaw_quat(normal), rgba=rgba,
        )


def _add_drawer(spec_: mujoco.MjSpec, wb: mujoco.MjsBody, d: DrawerSpec) -> None:
    hx, hy, hz, w = G.cabinet_half_x(d), G.CABINET_HALF_Y, G.CABINET_HALF_Z, G.CABINET_WALL
    cab = wb.add_body(name=f"{d.name}/cabinet", pos=[d.pos[0], d.pos[1], 0.0], quat=yaw_quat(d.yaw))
    rgba = _rgba(d.color)
    for nm, size, pos in (
        ("bottom", [hx, hy, w / 2], [0, 0, w / 2]),
        ("top", [hx, hy, w / 2], [0, 0, 2 * hz - w / 2]),
        ("back", [w / 2, hy, hz], [hx - w / 2, 0, hz]),
        ("left", [hx, w / 2, hz], [0, hy - w / 2, hz]),
        ("right", [hx, w / 2, hz], [0, -hy + w / 2, hz]),
    ):
        cab.add_geom(name=f"{d.name}/cabinet_{nm}", type=_BOX, size=size, pos=pos, rgba=rgba)
    drw = cab.add_body(name=d.name)
    drw.add_joint(
        name=f"{d.name}/slide", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[-1, 0, 0], range=[0, d.travel],
        limited=mujoco.mjtLimited.mjLIMITED_TRUE, damping=d.damping, armature=0.01,
    )
    ix, iy = hx - w - 0.002, hy - w - 0.003  # drawer box inside the cabinet with a little clearance
    z0, z1 = w + 0.002, 2 * hz - w - 0.006
    zc, zh = (z0 + z1) / 2, (z1 - z0) / 2
    t = 0.005  # drawer wall half thickness
    shade = [0.85 * c for c in rgba[:3]] + [1.0]
    for nm, size, pos in (
        ("front", [t, iy, zh], [-hx + t, 0, zc]),
        ("back", [t, iy, zh * 0.8], [hx - w - 2 * t, 0, z0 + zh * 0.8]),
        ("bottom", [ix, iy, t], [-w / 2 - 0.001, 0, z0 + t]),
        ("left", [ix, t, zh * 0.8], [-w / 2 - 0.001, iy - t, z0 + zh * 0.8]),
        ("right", [ix, t, zh * 0.8], [-w / 2 - 0.001, -iy + t, z0 + zh * 0.8]),
    ):
        drw.add_geom(name=f"{d.name}/drawer_{nm}", type=_BOX, size=size, pos=pos, rgba=shade, density=300)
    dark = [0.2, 0.2, 0.2, 1.0]
    bar_x = -hx - G.HANDLE_STANDOFF
    drw.add_geom(name=f"{d.name}/handle", type=_BOX, size=list(G.HANDLE_HALF), pos=[bar_x, 0, G.HANDLE_Z], rgba=dark, density=300)
    so = (G.HANDLE_STANDOFF - G.HANDLE_HALF[0]) / 2  # standoff half length from the front face to the bar
    for k, y in enumerate((0.035, -0.035)):
        drw.add_geom(
            name=f"{d.name}/standoff{k}", type=_BOX, size=[so, 0.005, 0.005], pos=[-hx - so, y, G.HANDLE_Z], rgba=dark, density=300
        )
    spec_.add_exclude(bodyname1=f"{d.name}/cabinet", bodyname2=d.name)  # the slide joint keeps it in its runners


def _add_gripper(spec_: mujoco.MjSpec, wb: mujoco.MjsBody, cfg: SimConfig) -> None:
    hand = wb.add_body(name="robot/hand", gravcomp=1.0)
    lo, hi = G.ACTION_LOW, G.ACTION_HIGH
    for axis, nm in (([1, 0, 0], "x"), ([0, 1, 0], "y"), ([0, 0, 1], "z")):
        hand.add_joint(name=f"robot/{nm}", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=axis, armature=0.01)
    hand.add_joint(name="robot/yaw", type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0, 0, 1], armature=0.001)
    hand.add_geom(name="robot/palm", type=_BOX, size=list(G.PALM_HALF), pos=[0, 0, G.PALM_Z], mass=HAND_MASS, rgba=[0.3, 0.3, 0.35, 1])
    hand.add_site(name="robot/tcp", size=[0.004, 0, 0], rgba=[1, 0, 0, 0.5], group=3)
    wpos = np.array([0.035, 0.0, 0.05])  # just in front of and below the palm, looking down past the fingertips
    hand.add_camera(name="wrist", pos=wpos.tolist(), quat=_look_at_quat(wpos, np.array([0.06, 0.0, -0.1])), fovy=80)
    for side, sign in (("left", 1.0), ("right", -1.0)):
        f = hand.add_body(name=f"robot/finger_{side}", gravcomp=1.0)
        f.add_joint(
            name=f"robot/finger_{side}", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[0, sign, 0], range=list(G.FINGER_RANGE),
            limited=mujoco.mjtLimited.mjLIMITED_TRUE, armature=0.001, damping=FINGER_DAMPING,
            solref_limit=[0.005, 1.0],  # a stiff stop: squeezing on nothing keeps the gap at ~0
        )
        f.add_geom(
            name=f"robot/finger_{side}", type=_BOX, size=list(G.FINGER_HALF), pos=[0, sign * G.FINGER_HALF[1], G.FINGER_Z],
            mass=FINGER_MASS, friction=[1.5, 0.005, 0.001], condim=4, rgba=[0.75, 0.75, 0.8, 1],
        )
    spec_.add_exclude(bodyname1="robot/finger_left", bodyname2="robot/finger_right")
    joints = ("robot/x", "robot/y", "robot/z", "robot/yaw", "robot/finger_left", "robot/finger_right")
    kps = (XYZ_KP, XYZ_KP, XYZ_KP, YAW_KP, FINGER_KP, FINGER_KP)
    forces = (XYZ_FORCE, XYZ_FORCE, XYZ_FORCE, YAW_TORQUE, FINGER_FORCE, FINGER_FORCE)
    ranges = ((lo[0], hi[0]), (lo[1], hi[1]), (lo[2], hi[2]), (lo[3], hi[3]), G.FINGER_CTRL, G.FINGER_CTRL)
    for jn, kp, frc, rng in zip(joints, kps, forces, ranges):
        act = spec_.add_actuator(name=f"{jn}_act", target=jn, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=kp, dampratio=1.0)
        act.ctrlrange = list(rng)
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-frc, frc]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE


def finger_target(grip: float) -> float:
    """Finger slide target for a grip command in [0, 1] (0 closed and squeezing, 1 fully open)."""
    return G.FINGER_CTRL[0] + grip * (G.FINGER_CTRL[1] - G.FINGER_CTRL[0])


def _make_spec(spec: ScenarioSpec, cfg: SimConfig) -> mujoco.MjSpec:
    ms = mujoco.MjSpec()
    ms.modelname = f"coda_{spec.family}"
    opt = ms.option
    opt.timestep = cfg.physics_dt
    opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    opt.impratio = 10.0
    opt.gravity = [0.0, 0.0, -spec.physics.gravity]
    ms.visual.global_.offwidth = 1024
    ms.visual.global_.offheight = 1024
    ms.visual.quality.shadowsize = 512  # small shadow map: keyframes render fast on CPU rasterisers
    ms.visual.headlight.ambient = [0.4, 0.4, 0.4]
    ms.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    wb = ms.worldbody
    wb.add_light(name="sun", pos=[0.0, 0.0, 1.5], dir=[0.0, 0.0, -1.0], diffuse=[0.5, 0.5, 0.5], castshadow=False)
    wb.add_geom(
        name="table/top", type=_BOX, size=list(G.TABLE_HALF), pos=[0, 0, -G.TABLE_HALF[2]], rgba=[0.62, 0.5, 0.38, 1]
    )
    fpos = np.array([-0.62, 0.0, 0.78])
    wb.add_camera(name="front", pos=fpos.tolist(), quat=_look_at_quat(fpos, np.array([0.02, 0.0, 0.0])), fovy=45)
    heights = resting_heights(spec)
    for o in spec.objects:
        _add_object(wb, o, heights[o.name], spec)
    for c in spec.containers:
        _add_container(wb, c)
    for d in spec.drawers:
        _add_drawer(ms, wb, d)
    for r in spec.regions:
        wb.add_geom(
            name=f"{r.name}/marker", type=_BOX, size=[r.half[0], r.half[1], 0.0005], pos=[r.center[0], r.center[1], 0.0006],
            rgba=_rgba(r.color, 0.7), contype=0, conaffinity=0, group=1,
        )
    _add_gripper(ms, wb, cfg)
    return ms


def build_scene(spec: ScenarioSpec, config: SimConfig | None = None) -> BuiltScene:
    """Build and compile the scene of `spec` and index it.

    Args:
        spec: the scenario.
        config: simulator settings (timestep, control rate); defaults to `SimConfig()`.
    Returns:
        The compiled model with its `SceneIndex`.
    Raises:
        BuildError: the scene cannot be built (stacking cycle, rates that do not divide, compile failure).
    """
    cfg = config or SimConfig()
    substeps = substeps_for(cfg)
    ms = _make_spec(spec, cfg)
    try:
        model = ms.compile()
    except ValueError as e:
        raise BuildError(f"scenario {spec.spec_id} failed to compile: {str(e).splitlines()[0]}") from None
    return BuiltScene(spec=spec, model=model, index=_index(spec, model, substeps))


def build_model(spec: ScenarioSpec, config: SimConfig | None = None) -> mujoco.MjModel:
    """The compiled `mujoco.MjModel` of `spec` (see `build_scene` for the index and the errors)."""
    return build_scene(spec, config).model


def _index(spec: ScenarioSpec, m: mujoco.MjModel, substeps: int) -> SceneIndex:
    """The scene's entity rows (objects, containers, drawers, regions) with their model ids and start state."""
    ents: tuple[G.Entity, ...] = (*spec.objects, *spec.containers, *spec.drawers, *spec.regions)
    kinds = tuple(
        "object" if isinstance(e, ObjectSpec) else "container" if isinstance(e, ContainerSpec)
        else "drawer" if isinstance(e, DrawerSpec) else "region"
        for e in ents
    )
    types = tuple(
        e.shape if isinstance(e, ObjectSpec) else e.kind if isinstance(e, ContainerSpec) else k  # type: ignore[union-attr]
        for e, k in zip(ents, kinds)
    )
    rgb = np.array([PALETTE[e.color][:3] for e in ents], dtype=np.float64).reshape(len(ents), 3)
    size, static_pos, static_rot = _static_geometry(ents)
    n_obj = len(spec.objects)
    obj_rows = np.arange(n_obj)
    obj_j = [m.joint(f"{o.name}/free").id for o in spec.objects]
    drawer_rows = np.arange(n_obj + len(spec.containers), n_obj + len(spec.containers) + len(spec.drawers))
    drw_j = [m.joint(f"{d.name}/slide").id for d in spec.drawers]
    axes = np.array([[*G.drawer_axis(d), 0.0] for d in spec.drawers]).reshape(-1, 3)
    gj = [m.joint(nm).id for nm in ("robot/x", "robot/y", "robot/z", "robot/yaw", "robot/finger_left", "robot/finger_right")]
    geom_entity, cabinets = _geom_entities(spec, m, ents, kinds)
    qadr = np.array([m.jnt_qposadr[j] for j in gj])
    init_qpos, init_ctrl = _initial_state(spec, m, qadr, drw_j)
    return SceneIndex(
        names=tuple(e.name for e in ents),
        kinds=kinds,
        types=types,  # type: ignore[arg-type]
        texts=tuple(entity_text(e) for e in ents),
        rgb=rgb,
        size=size,
        static_pos=static_pos,
        static_rot=static_rot,
        obj_rows=obj_rows,
        obj_qpos=np.array([m.jnt_qposadr[j] for j in obj_j], dtype=np.int64),
        obj_qvel=np.array([m.jnt_dofadr[j] for j in obj_j], dtype=np.int64),
        obj_body=np.array([m.body(o.name).id for o in spec.objects], dtype=np.int64),
        drawer_rows=drawer_rows,
        drawer_qpos=np.array([m.jnt_qposadr[j] for j in drw_j], dtype=np.int64),
        drawer_qvel=np.array([m.jnt_dofadr[j] for j in drw_j], dtype=np.int64),
        drawer_axis=axes,
        drawer_travel=np.array([d.travel for d in spec.drawers], dtype=np.float64),
        grip_qpos=qadr.astype(np.int64),
        grip_qvel=np.array([m.jnt_dofadr[j] for j in gj[:3]], dtype=np.int64),
        finger_geoms=(m.geom("robot/finger_left").id, m.geom("robot/finger_right").id),
        geom_entity=geom_entity,
        contact_names=(*(e.name for e in ents), "table", *cabinets),
        init_qpos=init_qpos,
        init_ctrl=init_ctrl,
        substeps=substeps,
    )


def _static_geometry(ents: Sequence[G.Entity]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per entity row: half extents (n, 3), and the position (n, 3) and rotation (n, 3, 3) of what does not
    move (container floors, drawer handles when closed, region centres; zeros and identity for objects)."""
    n = len(ents)
    size = np.zeros((n, 3))
    static_pos = np.zeros((n, 3))
    static_rot = np.tile(np.eye(3), (n, 1, 1))
    for i, e in enumerate(ents):
        if isinstance(e, ObjectSpec):
            size[i] = e.size
        elif isinstance(e, ContainerSpec):
            size[i] = e.size
            static_pos[i] = (e.pos[0], e.pos[1], G.CONTAINER_FLOOR)
            static_rot[i] = yaw_mat(e.yaw)
        elif isinstance(e, DrawerSpec):
            size[i] = (G.cabinet_half_x(e), G.CABINET_HALF_Y, G.CABINET_HALF_Z)
            static_pos[i] = G.handle_position(e, 0.0)
            static_rot[i] = yaw_mat(e.yaw)
        else:
            size[i] = (e.half[0], e.half[1], 0.0)
            static_pos[i] = (e.center[0], e.center[1], 0.0)
    return size, static_pos, static_rot


def _geom_entities(spec: ScenarioSpec, m: mujoco.MjModel, ents: Sequence[G.Entity],
                   kinds: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Per model geom, its contact row (-1: none): the entity's row, n for the table, n + 1, ... for the drawer
    cabinets (whose names come second); region markers map to their region's row."""
    n = len(ents)
    row_of_body: dict[int, int] = {}
    cabinets: list[str] = []
    for i, e in enumerate(ents):
        if kinds[i] != "region":
            row_of_body[m.body(e.name).id] = i
        if isinstance(e, DrawerSpec):  # the fixed cabinet is not the drawer: touching it is not holding it
            cabinets.append(f"{e.name}/cabinet")
            row_of_body[m.body(f"{e.name}/cabinet").id] = n + len(cabinets)
    geom_entity = np.full(m.ngeom, -1, dtype=np.int64)
    table = m.geom("table/top").id
    for g in range(m.ngeom):
        if g == table:
            geom_entity[g] = n
        elif int(m.geom_bodyid[g]) in row_of_body:
            geom_entity[g] = row_of_body[int(m.geom_bodyid[g])]
    first_region = len(spec.objects) + len(spec.containers) + len(spec.drawers)
    for i, r in enumerate(spec.regions):
        geom_entity[m.geom(f"{r.name}/marker").id] = first_region + i
    return geom_entity, cabinets


def _initial_state(spec: ScenarioSpec, m: mujoco.MjModel, qadr: np.ndarray,
                   drw_j: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The reset qpos (gripper at its start pose, drawers at their start fraction) and control."""
    init_qpos = m.qpos0.copy()
    start = spec.robot
    fq = float(np.clip(finger_target(start.grip), *G.FINGER_RANGE))
    init_qpos[qadr] = [*start.pos, start.yaw, fq, fq]
    for d, j in zip(spec.drawers, drw_j):
        init_qpos[m.jnt_qposadr[j]] = d.fraction * d.travel
    init_ctrl = np.array([*start.pos, start.yaw, finger_target(start.grip), finger_target(start.grip)])
    return init_qpos, init_ctrl
