"""Scripted experts for the four tabletop families, closed-loop from any state.

An expert is a state machine re-derived from the *current* state at every call: it finds which phase the
scene is in (object already held, drawer half open, object knocked over, dropped on the way...) and plans
the remaining waypoints from there. `Expert.act(state)` returns an action chunk (H, 5) of absolute targets:
row 0 is the closed-loop action for this state, later rows follow the same plan kinematically (bounded
speed per control step), so executing a whole chunk open loop also works.

Conventions that keep the demonstrations unimodal (behaviour cloning suffers from a multimodal expert):
- Grasp yaw is a fixed function of the object's pose: spheres and upright cylinders 0; boxes the yaw of
  their faces reduced to [-pi/4, pi/4] (across the narrow side only when the other side is too wide for
  the jaws); lying cylinders across their axis.
- Grasp height: the object's centre, raised if the palm would touch its top, never below 12 mm.
- Carry height: the held object's bottom 3 cm above the highest thing on the table.
- Push: jaws open as a two-pronged fork, perpendicular to the object-to-region direction, low on the table.
- Drawer: grasp the handle bar with jaws closing along the drawer's axis, slide it to the goal fraction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.errors import CodaError
from coda.scene import geometry as G
from coda.scene.spec import GoalPredicate, ScenarioSpec
from coda.sim.tabletop import predicates as P
from coda.sim.tabletop.predicates import TabletopState

FAST, SLOW, PUSH_SPEED, DRAWER_SPEED = 0.03, 0.012, 0.008, 0.01  # max TCP travel per control step, m
YAW_STEP = 0.3  # max yaw change per control step, rad
CLEARANCE = 0.03  # gap kept above the highest thing on the table while travelling, m
RELEASE_GAP = 0.008  # the held object's bottom above the target surface when it is let go, m
MIN_GRASP_Z = 0.012  # lowest TCP height for a grasp (fingertips 7 mm above the table), m
PUSH_Z = 0.015  # TCP height while pushing, m
DRAWER_GRIP = 0.6  # grip command that opens the jaws just enough to straddle a handle bar
XY_TOL, Z_TOL, YAW_TOL = 0.01, 0.012, 0.15  # "at the pose" tolerances
# The push expert stops once the object's centre is in this share of the region's half extents (the inner
# half, each axis), or once its push towards the centre has run its course with the object in the region
# (demos end at 0.45-0.65 of the half extent), not as soon as it crosses the edge: a demo that ends at the
# edge teaches a policy to stop there, and a few millimetres short is then a failure.
PUSH_DEPTH = 0.5


class ExpertError(CodaError, ValueError):
    """No scripted expert handles this goal (unknown predicate or entities of the wrong kind)."""


@dataclass(frozen=True)
class Waypoint:
    """A TCP target (x, y, z, yaw) with its grip command, approach speed and hold time."""

    pose: tuple[float, float, float, float]
    grip: float
    speed: float = FAST  # max metres per control step towards the pose
    dwell: int = 0  # extra control steps holding the pose once reached
    name: str = ""  # phase name, for inspection


def wrap_half(a: float) -> float:
    """An angle reduced to (-pi/2, pi/2]: parallel jaws look the same after a half turn."""
    a = math.fmod(a + math.pi / 2, math.pi)
    a = a + math.pi if a <= 0 else a
    return a - math.pi / 2


def wrap_quarter(a: float) -> float:
    """An angle reduced to (-pi/4, pi/4]: a box looks the same after a quarter turn."""
    a = math.fmod(a + math.pi / 4, math.pi / 2)
    a = a + math.pi / 2 if a <= 0 else a
    return a - math.pi / 4


def interpolate(s: TabletopState, plan: Sequence[Waypoint], horizon: int) -> np.ndarray:
    """Turn waypoints into `horizon` absolute actions from the gripper's current pose (bounded speeds)."""
    cur = np.array([*s.gripper_pos, s.gripper_yaw], dtype=np.float64)
    out: list[np.ndarray] = []
    for wp in plan:
        target = np.asarray(wp.pose, dtype=np.float64)
        while len(out) < horizon:
            delta = target - cur
            dist = float(np.linalg.norm(delta[:3]))
            if dist <= wp.speed and abs(delta[3]) <= YAW_STEP:
                cur = target.copy()
                out.append(np.append(cur, wp.grip))
                break
            if dist > wp.speed:
                cur[:3] += delta[:3] * (wp.speed / dist)
            else:
                cur[:3] = target[:3]
            cur[3] += float(np.clip(delta[3], -YAW_STEP, YAW_STEP))
            out.append(np.append(cur, wp.grip))
        for _ in range(wp.dwell):
            if len(out) >= horizon:
                break
            out.append(np.append(cur, wp.grip))
        if len(out) >= horizon:
            break
    if not out:  # an empty plan holds the current pose with the jaws open
        out.append(np.append(cur, 1.0))
    while len(out) < horizon:
        out.append(out[-1].copy())
    chunk = np.stack(out[:horizon]).astype(np.float32)
    np.clip(chunk, G.ACTION_LOW, G.ACTION_HIGH, out=chunk)
    return chunk


# ---- scene measures the experts share ---------------------------------------------------------------


def grasp_yaw(s: TabletopState, obj: str) -> float:
    """The expert's grasp yaw for an object: a fixed function of its pose (see module docstring)."""
    i = s.row(obj, "object")
    r, t = s.rot[i], s.types[i]
    if t == "sphere":
        return 0.0
    if t == "cylinder":
        ax = r[:, 2]
        if abs(ax[2]) > 0.7:  # upright: round seen from above
            return 0.0
        return wrap_half(math.atan2(ax[1], ax[0]))  # jaws close across the lying cylinder's axis
    up = int(np.argmax(np.abs(r[2, :])))
    a, b = [k for k in range(3) if k != up]
    wa, wb = 2 * s.size[i, a], 2 * s.size[i, b]
    yaw_a = math.atan2(r[1, a], r[0, a])
    if max(wa, wb) <= G.MAX_OPENING - 0.015:
        return wrap_quarter(yaw_a)
    narrow_yaw = yaw_a if wa <= wb else math.atan2(r[1, b], r[0, b])
    return wrap_half(narrow_yaw - math.pi / 2)  # jaws close along the narrow axis


def grasp_z(s: TabletopState, obj: str) -> float:
    """TCP height for grasping an object: its centre, raised so the palm clears its top."""
    c = float(s.pos[s.row(obj), 2])
    t = P.top(s, obj)
    z = max(c, t - (G.PALM_Z - G.PALM_HALF[2]) + 0.01, MIN_GRASP_Z)
    return min(z, max(t - 0.008, MIN_GRASP_Z))


def highest_top(s: TabletopState, exclude: str | None = None) -> float:
    """Highest point of anything on the table except `exclude`, m."""
    best = 0.0
    for name, kind in zip(s.names, s.kinds):
        if name != exclude and kind != "region":
            best = max(best, P.top(s, name))
    return best


FORK_HALF = G.FINGER_RANGE[1] + G.FINGER_HALF[1]  # lateral offset of each open finger's centre, m


def fork_contact(s: TabletopState, obj: str, d: np.ndarray) -> float:
    """Distance from an object's centre to the TCP when the open jaws, held across the push direction
    `d`, touch the object from behind."""
    i = s.row(obj, "object")
    t = s.types[i]
    upright = t == "sphere" or (t == "cylinder" and abs(s.rot[i, 2, 2]) > 0.7)
    if upright:
        r = float(s.size[i, 0])
        return math.sqrt(max(r * r - FORK_HALF * FORK_HALF, 0.0)) + G.FINGER_HALF[0]
    return P.extent_along(s, obj, d) + G.FINGER_HALF[0]


def _pose(x: float, y: float, z: float, yaw: float) -> tuple[float, float, float, float]:
    return (float(x), float(y), float(min(z, G.ACTION_HIGH[2])), float(yaw))


class Expert:
    """Base class: `plan(state)` gives the remaining waypoints; `act(state)` turns them into a chunk."""

    def __init__(self, horizon: int = 8) -> None:
        if horizon < 1:
            raise ExpertError(f"expert horizon = {horizon} must be >= 1")
        self.horizon = horizon

    def plan(self, s: TabletopState) -> list[Waypoint]:
        """The waypoints still to go from state `s`, first one current."""
        raise NotImplementedError

    def act(self, s: TabletopState) -> np.ndarray:
        """Action chunk float32 (H, 5) of absolute targets (x, y, z, yaw, grip) from state `s`."""
        return interpolate(s, self.plan(s), self.horizon)

    def phase(self, s: TabletopState) -> str:
        """Name of the phase the expert is in at `s`."""
        plan = self.plan(s)
        return plan[0].name if plan else "idle"

    def done(self, s: TabletopState) -> bool:
        """True when this expert's goal holds in `s`."""
        raise NotImplementedError


def _retreat(s: TabletopState, z: float, grip: float = 1.0) -> Waypoint:
    g = s.gripper_pos
    return Waypoint(_pose(g[0], g[1], max(z, g[2]), s.gripper_yaw), grip, FAST, 0, "retreat")


class TransportExpert(Expert):
    """Pick an object and put it in a container (`in`) or on another object (`on`)."""

    def __init__(self, goal: GoalPredicate, horizon: int = 8) -> None:
        super().__init__(horizon)
        if goal.name not in ("in", "on"):
            raise ExpertError(f"TransportExpert handles 'in' and 'on' goals, not '{goal.name}'")
        self.goal = goal
        self.obj, self.target = goal.args

    def done(self, s: TabletopState) -> bool:
        return P.goal_holds(s, self.goal)

    def _surface(self, s: TabletopState) -> tuple[float, float, float]:
        i = s.row(self.target)
        if self.goal.name == "in":
            return float(s.pos[i, 0]), float(s.pos[i, 1]), float(s.pos[i, 2])
        return float(s.pos[i, 0]), float(s.pos[i, 1]), P.top(s, self.target)

    def plan(self, s: TabletopState) -> list[Waypoint]:
        o = self.obj
        oi = s.row(o, "object")
        g = s.gripper_pos
        tx, ty, surface = self._surface(s)
        clear = highest_top(s, exclude=o) + CLEARANCE
        if self.done(s):
            return [_retreat(s, clear + 0.02)]
        held = P.grasped(s, o)
        gyaw = grasp_yaw(s, o)
        gz = grasp_z(s, o)
        bot = P.bottom(s, o)
        offset = (g[2] - bot) if held else (gz - bot)  # TCP height above the object's bottom while held
        carry_z = clear + offset
        place_z = surface + RELEASE_GAP + offset
        # While held the object may sit off-centre in the jaws: aim the object, not the TCP, at the target.
        dx, dy = (g[0] - s.pos[oi, 0], g[1] - s.pos[oi, 1]) if held else (0.0, 0.0)
        hold_yaw = s.gripper_yaw if held else gyaw
        above_t = Waypoint(_pose(tx + dx, ty + dy, carry_z, hold_yaw), 0.0, FAST, 0, "carry")
        lower = Waypoint(_pose(tx + dx, ty + dy, place_z, hold_yaw), 0.0, SLOW, 0, "lower")
        release = Waypoint(_pose(tx + dx, ty + dy, place_z, hold_yaw), 1.0, SLOW, 3, "release")
        up = Waypoint(_pose(tx + dx, ty + dy, carry_z + 0.03, hold_yaw), 1.0, FAST, 0, "retreat")
        tail = [lower, release, up]
        if held:
            err = math.hypot(s.pos[oi, 0] - tx, s.pos[oi, 1] - ty)
            if err < XY_TOL and bot < surface + RELEASE_GAP + 0.015:
                return [Waypoint(_pose(g[0], g[1], g[2], s.gripper_yaw), 1.0, SLOW, 3, "release"), up]
            if err < 1.5 * XY_TOL:
                return tail
            if bot < clear - 0.01:
                return [Waypoint(_pose(g[0], g[1], carry_z, s.gripper_yaw), 0.0, FAST, 0, "lift"), above_t, *tail]
            return [above_t, *tail]
        ox, oy = float(s.pos[oi, 0]), float(s.pos[oi, 1])
        need = P.extent_along(s, o, np.array([-math.sin(gyaw), math.cos(gyaw), 0.0])) * 2 + 0.01
        empty_z = clear + 0.005 - G.FINGERTIP_BELOW_TCP
        above_o = Waypoint(_pose(ox, oy, empty_z, gyaw), 1.0, FAST, 0, "approach")
        descend = Waypoint(_pose(ox, oy, gz, gyaw), 1.0, SLOW, 0, "descend")
        close = Waypoint(_pose(ox, oy, gz, gyaw), 0.0, SLOW, 2, "close")
        lift = Waypoint(_pose(ox, oy, carry_z, gyaw), 0.0, FAST, 0, "lift")
        grab = [close, lift, above_t, *tail]
        xy_err = math.hypot(g[0] - ox, g[1] - oy)
        yaw_ok = abs(s.gripper_yaw - gyaw) < YAW_TOL
        if xy_err < XY_TOL and abs(g[2] - gz) < Z_TOL and yaw_ok:
            if s.grip_cmd < 0.5 and s.gripper_width < need - 0.02:  # closed on nothing: open and start over
                return [Waypoint(_pose(g[0], g[1], empty_z, s.gripper_yaw), 1.0, SLOW, 0, "reopen"), above_o, descend, *grab]
            return grab
        high = g[2] >= P.top(s, o) + 0.02
        if xy_err < (XY_TOL if high else 2.5 * XY_TOL) and yaw_ok and s.gripper_width >= need:
            return [descend, *grab]
        if g[2] < empty_z - 0.015:
            return [Waypoint(_pose(g[0], g[1], empty_z, s.gripper_yaw), 1.0, FAST, 0, "rise"), above_o, descend, *grab]
        return [above_o, descend, *grab]


class PushExpert(Expert):
    """Slide an object too wide to grasp into a region, pushing with the open jaws as a fork."""

    def __init__(self, goal: GoalPredicate, horizon: int = 8) -> None:
        super().__init__(horizon)
        if goal.name != "at_region":
            raise ExpertError(f"PushExpert handles 'at_region' goals, not '{goal.name}'")
        self.goal = goal
        self.obj, self.region = goal.args

    def done(self, s: TabletopState) -> bool:
        """The object's centre is well inside the region (`PUSH_DEPTH`), which implies the goal `at_region`."""
        return P.at_region(s, self.obj, self.region, share=PUSH_DEPTH)

    def plan(self, s: TabletopState) -> list[Waypoint]:
        o, r = self.obj, self.region
        oi, ri = s.row(o, "object"), s.row(r, "region")
        g = s.gripper_pos
        safe_z = highest_top(s) + CLEARANCE + 0.005 - G.FINGERTIP_BELOW_TCP
        if self.done(s):
            return [_retreat(s, safe_z)]
        op, tp = s.pos[oi, :2], s.pos[ri, :2]
        delta = tp - op
        dist = float(np.linalg.norm(delta))
        d = delta / max(dist, 1e-9)
        perp = np.array([-d[1], d[0]])
        ext = fork_contact(s, o, d)
        pyaw = wrap_half(math.atan2(d[1], d[0]))
        pre = op - d * (ext + 0.03)
        final = tp - d * (ext - 0.005)  # a little past contact: the fingers give way slightly
        if P.at_region(s, o, r) and float(np.linalg.norm(g[:2] - final)) < XY_TOL:
            return [_retreat(s, safe_z)]  # the push is done and the object is in, if short of the inner half
        at_pre_high = Waypoint(_pose(pre[0], pre[1], safe_z, pyaw), 1.0, FAST, 0, "approach")
        down = Waypoint(_pose(pre[0], pre[1], PUSH_Z, pyaw), 1.0, SLOW, 0, "descend")
        push = Waypoint(_pose(final[0], final[1], PUSH_Z, pyaw), 1.0, PUSH_SPEED, 0, "push")
        rel = g[:2] - op
        along, lat = float(rel @ d), float(rel @ perp)
        down_now = g[2] < PUSH_Z + 0.012
        yaw_ok = abs(s.gripper_yaw - pyaw) < 0.2
        if down_now and -(ext + 0.06) < along < 0.0 and abs(lat) < 0.025 and yaw_ok:
            return [push]
        if not down_now and float(np.linalg.norm(g[:2] - pre)) < 2 * XY_TOL and yaw_ok:
            return [down, push]
        if g[2] < safe_z - 0.015:
            return [Waypoint(_pose(g[0], g[1], safe_z, s.gripper_yaw), 1.0, FAST, 0, "rise"), at_pre_high, down, push]
        return [at_pre_high, down, push]


class DrawerExpert(Expert):
    """Grasp a drawer's handle and slide the drawer to the goal fraction."""

    def __init__(self, goal: GoalPredicate, horizon: int = 8) -> None:
        super().__init__(horizon)
        if goal.name != "drawer_fraction" or goal.value is None or goal.tol is None:
            raise ExpertError(f"DrawerExpert handles 'drawer_fraction' goals with value and tol, not {goal}")
        self.goal = goal
        self.drawer = goal.args[0]
        self.value = float(min(max(goal.value, 0.0), 1.0))
        self.tol = float(goal.tol)

    def done(self, s: TabletopState) -> bool:
        return P.goal_holds(s, self.goal)

    def plan(self, s: TabletopState) -> list[Waypoint]:
        i = s.row(self.drawer, "drawer")
        g = s.gripper_pos
        h = s.pos[i]
        u = s.axis[i]
        frac = float(s.fraction[i])
        hyaw = wrap_half(math.atan2(u[1], u[0]) - math.pi / 2)  # jaws close along the drawer's axis
        safe_z = max(2 * G.CABINET_HALF_Z, float(h[2])) + CLEARANCE + 0.005 - G.FINGERTIP_BELOW_TCP
        held = P.grasped(s, self.drawer)
        # Jaws under the cabinet's top (e.g. caught in the drawer as it closed) cannot rise: slide out first.
        u2, perp = u[:2], np.array([-u[1], u[0]])
        half_x, half_y = float(s.size[i, 0]), float(s.size[i, 1])
        centre = h[:2] - u2 * (half_x + G.HANDLE_STANDOFF + frac * float(s.travel[i]))
        rel = g[:2] - centre
        lat = float(rel @ perp)
        if abs(float(rel @ u2)) <= half_x + 0.01 and abs(lat) <= half_y + 0.01 and g[2] < 2 * G.CABINET_HALF_Z:
            out = centre + u2 * (half_x + 0.04) + perp * lat
            return [Waypoint(_pose(out[0], out[1], g[2], s.gripper_yaw), DRAWER_GRIP, SLOW, 0, "escape"),
                    Waypoint(_pose(out[0], out[1], safe_z, s.gripper_yaw), DRAWER_GRIP, FAST, 0, "rise")]
        if abs(frac - self.value) <= min(0.02, self.tol / 2):
            if held or s.grip_cmd < DRAWER_GRIP:
                return [Waypoint(_pose(g[0], g[1], g[2], s.gripper_yaw), DRAWER_GRIP, SLOW, 2, "release"), _retreat(s, safe_z)]
            return [_retreat(s, safe_z)]
        goal_h = h + u * (self.value - frac) * float(s.travel[i])
        move = Waypoint(_pose(goal_h[0], goal_h[1], h[2], hyaw), 0.0, DRAWER_SPEED, 0, "slide")
        release = Waypoint(_pose(goal_h[0], goal_h[1], h[2], hyaw), DRAWER_GRIP, SLOW, 2, "release")
        up = Waypoint(_pose(goal_h[0], goal_h[1], safe_z, hyaw), DRAWER_GRIP, FAST, 0, "retreat")
        if held:
            return [move, release, up]
        close = Waypoint(_pose(h[0], h[1], h[2], hyaw), 0.0, SLOW, 2, "close")
        descend = Waypoint(_pose(h[0], h[1], h[2], hyaw), DRAWER_GRIP, SLOW, 0, "descend")
        above = Waypoint(_pose(h[0], h[1], safe_z, hyaw), DRAWER_GRIP, FAST, 0, "approach")
        xy_err = math.hypot(g[0] - h[0], g[1] - h[1])
        yaw_ok = abs(s.gripper_yaw - hyaw) < YAW_TOL
        if xy_err < 0.008 and abs(g[2] - h[2]) < 0.01 and yaw_ok:
            return [close, move, release, up]
        open_enough = s.gripper_width >= 0.03
        if xy_err < (XY_TOL if g[2] > safe_z - 0.02 else 2 * XY_TOL) and yaw_ok and open_enough:
            return [descend, close, move, release, up]
        if g[2] < safe_z - 0.015:
            return [Waypoint(_pose(g[0], g[1], safe_z, s.gripper_yaw), DRAWER_GRIP, FAST, 0, "rise"), above, descend, close, move, release, up]
        return [above, descend, close, move, release, up]


class GoalExpert(Expert):
    """Works through the goal's conjuncts in order, delegating to the first one that does not hold."""

    def __init__(self, spec: ScenarioSpec, horizon: int = 8) -> None:
        super().__init__(horizon)
        self.spec = spec
        self.parts: list[Expert] = [_expert_for_goal(g, spec, horizon) for g in spec.goal]

    def done(self, s: TabletopState) -> bool:
        return P.goal_satisfied(s, self.spec)

    def plan(self, s: TabletopState) -> list[Waypoint]:
        for part in self.parts:
            if not part.done(s):
                return part.plan(s)
        return [_retreat(s, highest_top(s) + CLEARANCE + 0.02)]


def _expert_for_goal(g: GoalPredicate, spec: ScenarioSpec, horizon: int) -> Expert:
    kinds = {e.name: k for k, group in (("object", spec.objects), ("container", spec.containers),
                                        ("drawer", spec.drawers), ("region", spec.regions)) for e in group}
    want = {"in": ("object", "container"), "on": ("object", "object"), "at_region": ("object", "region"),
            "drawer_fraction": ("drawer",)}[g.name]
    got = tuple(kinds[a] for a in g.args)
    if got != want:
        raise ExpertError(f"goal {P.goal_text(g)} needs entities of kinds {want}, got {got}")
    if g.name in ("in", "on"):
        return TransportExpert(g, horizon)
    if g.name == "at_region":
        return PushExpert(g, horizon)
    return DrawerExpert(g, horizon)


def expert_for(spec: ScenarioSpec, horizon: int = 8) -> Expert:
    """The scripted expert for a scenario's goal (any family; conjuncts are handled in order)."""
    return GoalExpert(spec, horizon)


@dataclass
class ExpertEpisode:
    """What an expert rollout produced."""

    success: bool
    length: int  # control steps taken
    states: list[TabletopState] = field(default_factory=list)  # state before each step, then the final one
    actions: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), np.float32))  # (T, 5) executed
    observations: list[dict[str, Any]] = field(default_factory=list)  # obs before each step, then the final one
    chunks: list[np.ndarray] = field(default_factory=list)  # (H, 5) expert chunk at each step (when recorded)


def rollout_expert(
    env: Any,
    spec: ScenarioSpec,
    max_steps: int | None = None,
    *,
    expert: Expert | None = None,
    replan_every: int = 1,
    record: bool = True,
    record_obs: bool = False,
) -> ExpertEpisode:
    """Reset `env` to `spec` and run the expert until success, truncation or `max_steps`.

    Args:
        env: a `TabletopEnv` (anything with reset_to, step, state).
        spec: the scenario.
        max_steps: step limit (defaults to the env's `max_steps`).
        expert: the expert to use (defaults to `expert_for(spec, env.config.expert_chunk)`).
        replan_every: actions executed from each chunk before asking the expert again (1 = closed loop).
        record: keep states, actions and chunks; `record_obs` also keeps observations.
    Returns:
        An `ExpertEpisode`.
    """
    if replan_every < 1:
        raise ExpertError(f"replan_every = {replan_every} must be >= 1")
    limit = int(max_steps if max_steps is not None else env.config.max_steps)
    obs, info = env.reset_to(spec)
    expert = expert or expert_for(spec, env.config.expert_chunk)
    ep = ExpertEpisode(success=bool(info["success"]), length=0)
    actions: list[np.ndarray] = []
    s = env.state()
    if record:
        ep.states.append(s)
    if record_obs:
        ep.observations.append(obs)
    done = ep.success
    while not done and ep.length < limit:
        chunk = expert.act(s)
        for k in range(min(replan_every, len(chunk))):
            if record and k == 0:
                ep.chunks.append(chunk)
            obs, _, terminated, truncated, info = env.step(chunk[k])
            ep.length += 1
            s = env.state()
            if record:
                actions.append(chunk[k])
                ep.states.append(s)
            if record_obs:
                ep.observations.append(obs)
            if terminated or truncated or ep.length >= limit:
                done = True
                break
    ep.success = bool(info["success"])
    if record and actions:
        ep.actions = np.stack(actions)
    return ep
