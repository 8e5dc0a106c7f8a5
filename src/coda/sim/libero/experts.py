"""Scripted experts on privileged state: pick-and-place for LIBERO `in` / `on` goals (libero_object,
libero_spatial and the pick-and-place tasks of other suites), opening a drawer, putting an object into a
drawer it opens first, and turning a stove on.

Pick-and-place waypoints (grip site targets): above the grasp point, down to it, close, lift to the carry
height, over the place point, down to the release height, open, up. Each control step is a proportional
OSC_POSE delta towards the current waypoint (positions re-read from the state every step, so a nudged
object is followed) with the orientation held pointing down, fingers closing along world y (heading pi/2
in `LiberoState.eef_yaw` terms), or along world x (heading 0) for a bowl in a cabinet compartment.

Grasps: bowls by the rim (the fingers close across the wall; a centre grasp does not fit the jaws) on
their +y side, or, when the bowl sits inside a fixture's bounding box (a cabinet layer, whose walls block
fingers closing along y), on the side facing the robot (-x) with the fingers closing along x; everything
else at its centre (tall objects 3 cm below their top).

The carry height clears, with the held object hanging below the fingers, the tallest thing near the carry
path: a movable object whose footprint comes within PATH_MARGIN of the held object's swept footprint (lower
carries knock the basket handle), or a fixture the held object passes over (a bowl taken out of a cabinet
layer must clear the cabinet's top; lifted up beside the cabinet, it need not). Objects away from the
path do not count: a bowl standing on the cabinet across the table lifted the carry to 1.26 m, and the arm,
lowering from there at the far edge of its workspace, straightened its elbow to its limit 4 cm above the
plate (libero_spatial task 7).

Articulated goals have their own experts, on the parts of `LiberoState.parts`:

- `DrawerExpert` (`open` a drawer region): the hand turns to face the drawer (pointing against the drawer's
  opening direction, fingers closing vertically) on its way to HAND_RISE above a point PRE_REACH in front
  of the handle, comes down to that point, narrows the fingers to about 4 cm, reaches in, closes on the
  handle bar and pulls along the opening direction. Facing the drawer, the hand hangs 10 cm below the
  grip site: moving straight to the front point it swept bowls on the table into its own path (6 of 50
  official states of libero_goal task 0 failed so), and the open lower finger caught a bowl standing in
  front of the drawer. A top-down grasp does not fit: the handle of the drawer above sits right over the
  bar, and the gap between bar and drawer front is narrower than a finger. The facing hand is outside
  CoDA's 5-D target contract (pointing down), so these demos are 7-D only.
- `DrawerPlaceExpert` (`in` a closed drawer's region): opens the drawer as above, lets go, and puts the object
  in with `InDrawerExpert`, which first slides the grasped object out from under the drawer now hanging over
  it (`clearing_shift`).
- `KnobExpert` (`turnon` a stove): the fingers close across the knob's fin over its pivot (pointing down)
  and the wrist turns by KNOB_TURN about the vertical. Pushing the fin's end sideways instead stalled at
  0.47 rad (the goal needs 0.5) on 3 of 10 official states: the arm, low and close to its base, could not
  follow the fin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from coda.sim.libero.errors import LiberoError
from coda.sim.libero.scenario import LiberoScenario
from coda.sim.libero.state import LiberoState

if TYPE_CHECKING:
    from coda.sim.libero.env import LiberoEnv

POS_SCALE, ROT_SCALE = 0.05, 0.5  # OSC_POSE: metres / radians per unit action
DOWN_Y = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])  # grip site x = world y, z down
HEADING_Y = float(np.pi / 2)  # heading of DOWN_Y (LiberoState.eef_yaw): fingers closing along world y
RIM_BACKOFF = 0.004  # grasp this far inside a bowl's outer radius, m
RIM_DEPTH = 0.02  # grasp this far below a bowl's rim, m
TALL_GRASP_BELOW_TOP = 0.03  # grasp tall objects this far below their top, m
CLEARANCE = 0.05  # the held object's bottom above the tallest movable object while carrying, m
RELEASE_GAP = 0.015  # the held object's bottom above the receiving surface when released, m
HOVER = 0.08  # approach height above the grasp point, m
TOL, GRASP_TOL = 0.012, 0.006  # waypoint reached within these distances, m
CLOSE_STEPS, OPEN_STEPS = 12, 10
PHASE_LIMIT = 80  # control steps after which a phase gives up waiting and moves on
POS_I_GAIN = 0.15  # integral gain: the compliant OSC (and a held load) leaves a steady error of ~1 cm
INTEGRAL_LIMIT = 0.05  # largest accumulated position error, m
CARRY_SPEED = 0.7  # largest translation action while holding (0.035 m per step): faster carries drop bowls
LOST_STEPS, MAX_RETRIES = 3, 2  # steps without the object in hand before grasping again; retries allowed
SETTLED_SPEED = 0.003  # grip site travel per step under which a reached waypoint counts (m)
STALL_STEPS, STALL_SPEED, STALL_ERROR = 5, 0.001, 0.025  # a waypoint within 2.5 cm where the arm stopped counts as reached
PATH_MARGIN = 0.05  # a movable object counts for the carry height when it comes this close to the held one's path, m


def yaw_rotation(angle: float) -> np.ndarray:
    """Rotation by `angle` about the world z axis."""
    c, s = float(np.cos(angle)), float(np.sin(angle))
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def in_compartment(s: LiberoState, name: str) -> bool:
    """Whether an object sits inside a fixture's bounding box (a cabinet layer): its centre within the
    fixture's horizontal extent and above the fixture's bottom, and its top below the fixture's top (an
    object resting on a stove or on a cabinet is not inside it)."""
    i = s.index[name]
    c, top = s.center[i], s.center[i, 2] + s.half[i, 2]
    for j in np.flatnonzero(s.fixture):
        f, h = s.center[j], s.half[j]
        if np.all(np.abs(c[:2] - f[:2]) <= h[:2]) and f[2] - h[2] <= c[2] and top <= f[2] + h[2]:
            return True
    return False


def path_gap(center: np.ndarray, half: np.ndarray, a: np.ndarray, b: np.ndarray, samples: int = 32) -> np.ndarray:
    """Horizontal gap between the segment a-b and each of N axis-aligned boxes (`center`, `half`: (N, 2)),
    0 where the segment crosses a box; measured at `samples` points along the segment."""
    points = a + np.linspace(0.0, 1.0, samples)[:, None] * (b - a)  # (S, 2)
    outside = np.maximum(np.abs(points[None] - center[:, None]) - half[:, None], 0.0)  # (N, S, 2)
    return np.linalg.norm(outside, axis=2).min(axis=1)


def _rotvec(r: np.ndarray) -> np.ndarray:
    """Axis-angle vector of rotation matrix `r`."""
    cos = np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0)
    angle = float(np.arccos(cos))
    if angle < 1e-9:
        return np.zeros(3)
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    n = np.linalg.norm(axis)
    if n < 1e-9:  # angle near pi: take the axis from the diagonal
        axis = np.sqrt(np.clip((np.diag(r) + 1.0) / 2.0, 0.0, None))
        n = np.linalg.norm(axis)
    return axis / n * angle


@dataclass(frozen=True)
class PickPlaceTask:
    """What to move where, read from a BDDL goal."""

    obj: str  # entity to pick
    target: str  # entity it goes in or on
    relation: str  # "in" or "on"


def pick_place_task(goal: list[list[str]], regions: dict[str, dict], names: tuple[str, ...]) -> PickPlaceTask:
    """The pick-and-place of a one-predicate `in` / `on` goal.

    Args:
        goal: BDDL goal atoms, e.g. [["in", "alphabet_soup_1", "basket_1_contain_region"]].
        regions: the parsed BDDL regions (region name -> {"target": entity, ...}).
        names: the scene's entity names.
    Raises:
        LiberoError: the goal is not a single `in`/`on` between known entities.
    """
    if len(goal) != 1 or len(goal[0]) != 3 or goal[0][0] not in ("in", "on"):
        raise LiberoError(f"goal = {goal} is not one 'in'/'on' predicate; the pick-and-place expert cannot solve it")
    relation, obj, where = goal[0]
    target = regions[where]["target"] if where in regions else where
    for field_name, name in (("object", obj), ("target", target)):
        if name not in names:
            raise LiberoError(f"goal {field_name} = {name!r} is not an entity of the scene; entities: {list(names)}")
    return PickPlaceTask(obj=obj, target=target, relation=relation)


@dataclass
class PickPlaceExpert:
    """Closed-loop waypoint expert: `act(state)` returns the next 7-D OSC_POSE delta action."""

    task: PickPlaceTask
    pos_gain: float = 1.0  # fraction of the remaining distance commanded per step (before clipping)
    phase: int = 0
    _in_phase: int = 0
    _integral: np.ndarray | None = None  # accumulated position error of the current phase, m
    _last: np.ndarray | None = None  # grip site position at the previous call
    _still: int = 0  # consecutive calls the grip site moved less than STALL_SPEED
    _lost: int = 0  # consecutive calls in a carrying phase without the object between the fingers
    retries: int = 0  # grasps started again after the object was lost
    _hang: float = 0.0  # grip site height above the held object's bottom, m
    _pick_bottom: float = -np.inf  # the picked object's bottom before it was lifted (world z, m)
    heading: float | None = None  # grip site heading held (eef_yaw convention), chosen at the first act()

    PHASES: ClassVar[tuple[str, ...]] = ("above", "down", "close", "lift", "over", "lower", "open", "up", "done")
    CARRYING: ClassVar[tuple[str, ...]] = ("lift", "over", "lower")  # phases with the object in hand
    MOVING: ClassVar[tuple[str, ...]] = ("above", "lift")  # waypoints that count as reached while still moving

    def reset(self) -> None:
        self.phase, self._in_phase, self._integral, self._last, self._still = 0, 0, None, None, 0
        self._lost, self.retries, self.heading = 0, 0, None

    @property
    def done(self) -> bool:
        return self.PHASES[self.phase] == "done"

    def _restart(self) -> None:
        """Forget what the grasp now given up had fixed (a grasp starts again)."""

    def _orientation(self) -> np.ndarray:
        """Target grip site orientation: pointing down with the chosen heading."""
        return yaw_rotation((self.heading if self.heading is not None else HEADING_Y) - HEADING_Y) @ DOWN_Y

    def _grasp_point(self, s: LiberoState) -> np.ndarray:
        i = s.index[self.task.obj]
        c, h = s.center[i], s.half[i]
        p = c.copy()
        category = s.texts[i]
        if "bowl" in category:  # rim point on the chosen side, 2 cm below the rim, in the bowl's own frame
            rot, lo, hi = s.rot[i], s.local_lo[i], s.local_hi[i]
            axis = rot[:, 2]
            radius = float(np.mean(hi[:2] - lo[:2])) / 2
            rim_centre = s.body_pos[i] + rot @ np.array([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, hi[2]])
            v = np.array([0.0, 1.0, 0.0]) if self.heading != 0.0 else np.array([-1.0, 0.0, 0.0])
            side = v - float(axis @ v) * axis
            side /= max(float(np.linalg.norm(side)), 1e-9)
            p = rim_centre + (radius - RIM_BACKOFF) * side - RIM_DEPTH * axis
        elif h[2] > 0.05:
            p[2] = c[2] + h[2] - TALL_GRASP_BELOW_TOP
        return p

    def _place_point(self, s: LiberoState) -> np.ndarray:
        """Grip site target that puts the held object's box centre over the target's and its bottom
        RELEASE_GAP above the target's top (measured on the object as it hangs now: grasps tilt bowls)."""
        i = s.index[self.task.obj]
        xy, top = self._goal_spot(s)
        bottom = s.center[i, 2] - s.half[i, 2]
        offset = s.eef_pos - s.center[i]
        return np.array([xy[0] + offset[0], xy[1] + offset[1], s.eef_pos[2] - (bottom - (top + RELEASE_GAP))])

    def _goal_spot(self, s: LiberoState) -> tuple[np.ndarray, float]:
        """(xy the held object's box centre goes to, height of the surface it is put on): the target's."""
        j = s.index[self.task.target]
        return s.center[j, :2], float(s.center[j, 2] + s.half[j, 2])

    def _carry_floor(self, s: LiberoState) -> float:
        """Height the held object's bottom clears (CLEARANCE above it) whatever is near the path: where it was
        picked from (an object picked from a cabinet top is carried at least as high as it started)."""
        return self._pick_bottom

    def _carry_z(self, s: LiberoState) -> float:
        i = s.index[self.task.obj]
        gap = path_gap(s.center[:, :2], s.half[:, :2], s.center[i, :2], self._goal_spot(s)[0])
        near = gap < float(np.max(s.half[i, :2])) + np.where(s.fixture, 0.0, PATH_MARGIN)
        near[i] = False
        # the target is on the path, so a fixture the object is put on (the cabinet's top) is cleared too
        tallest = float(np.max(s.center[near, 2] + s.half[near, 2], initial=-np.inf))
        return max(tallest, self._carry_floor(s)) + CLEARANCE + self._hang

    def _target(self, s: LiberoState) -> tuple[np.ndarray, float, float]:
        """(waypoint position, gripper command, tolerance) of the current phase."""
        name = self.PHASES[self.phase]
        if name in ("above", "down"):
            g = self._grasp_point(s)
            i = s.index[self.task.obj]
            self._hang = g[2] - (s.center[i, 2] - s.half[i, 2])
            self._pick_bottom = float(s.center[i, 2] - s.half[i, 2])
            if name == "above":
                return g + np.array([0.0, 0.0, HOVER]), -1.0, TOL
            return g, -1.0, GRASP_TOL
        if name == "close":
            return s.eef_pos.copy(), 1.0, np.inf
        if name == "lift":
            return np.array([*s.eef_pos[:2], self._carry_z(s)]), 1.0, TOL
        if name == "over":
            p = self._place_point(s)
            return np.array([p[0], p[1], self._carry_z(s)]), 1.0, TOL
        if name == "lower":
            return self._place_point(s), 1.0, TOL
        if name == "open":
            return s.eef_pos.copy(), -1.0, np.inf
        if name == "up":
            return s.eef_pos + np.array([0.0, 0.0, 0.1]), -1.0, np.inf
        return s.eef_pos.copy(), -1.0, np.inf

    def act(self, s: LiberoState) -> np.ndarray:
        """The next action (float32 (7,)) for state `s`; advances the phase when its waypoint is reached,
        and starts the grasp again (at most MAX_RETRIES times) when the carried object was lost."""
        if self.heading is None:  # a bowl in a cabinet layer is grasped from the robot's side
            bowl = "bowl" in s.texts[s.index[self.task.obj]]
            self.heading = 0.0 if bowl and in_compartment(s, self.task.obj) else HEADING_Y
        name = self.PHASES[self.phase]
        if name in self.CARRYING:
            self._lost = 0 if self.task.obj in s.grasped else self._lost + 1
            if self._lost >= LOST_STEPS and self.retries < MAX_RETRIES:
                self.retries += 1
                self.phase, self._in_phase, self._integral, self._still, self._lost = 0, 0, None, 0, 0
                self._restart()
                name = self.PHASES[0]
        target, grip, tol = self._target(s)
        self._in_phase += 1
        waited = {"close": CLOSE_STEPS, "open": OPEN_STEPS, "up": 10}.get(name)
        if waited is not None:  # timed phases (gripper closing or opening) wait their steps out
            advance = self._in_phase >= waited
        else:
            moved = np.inf if self._last is None else float(np.linalg.norm(s.eef_pos - self._last))
            self._still = self._still + 1 if moved < STALL_SPEED else 0
            dist = float(np.linalg.norm(target - s.eef_pos))
            stalled = self._still >= STALL_STEPS and dist < STALL_ERROR
            settled = moved < SETTLED_SPEED or name in self.MOVING  # release and grasp at rest, not swinging
            advance = (dist < tol and settled) or stalled or self._in_phase >= PHASE_LIMIT
        self._last = s.eef_pos.copy()
        err = target - s.eef_pos
        integral = err if self._integral is None else self._integral + err
        norm = float(np.linalg.norm(integral))
        self._integral = integral if norm <= INTEGRAL_LIMIT else integral * (INTEGRAL_LIMIT / norm)
        if name != "done" and advance:
            self.phase, self._in_phase, self._integral, self._still = self.phase + 1, 0, None, 0
        a = np.zeros(7)
        speed = CARRY_SPEED if name in self.CARRYING else 1.0
        command = self.pos_gain * err + (POS_I_GAIN * self._integral if self._integral is not None else 0.0)
        a[:3] = np.clip(command / POS_SCALE, -speed, speed)
        a[3:6] = np.clip(_rotvec(self._orientation() @ s.eef_rot.T) / ROT_SCALE, -1.0, 1.0)
        a[6] = grip
        return a.astype(np.float32)


PRE_REACH = 0.10  # the facing hand waits this far in front of a drawer handle before reaching in, m
HAND_RISE = 0.12  # the facing hand comes down to the drawer from this far above its handle, m
NARROW_STEPS = 4  # closing steps before reaching in: the fingers, 8 cm apart when open, go about 4 cm apart
PULL_AHEAD = 0.08  # while pulling, the target runs this far ahead of the handle along the opening direction, m
KNOB_BELOW_TOP = 0.02  # the fingers close on a knob's fin this far below its top, m
KNOB_TURN = 0.9  # the wrist turns a grasped knob this far (rad); LIBERO's stoves are on from 0.5 rad


def facing(direction: np.ndarray) -> np.ndarray:
    """Grip site orientation pointing along the horizontal `direction`, fingers closing vertically; of the two
    such orientations, the one a quarter turn from pointing down along DOWN_Y's x (grip x down), not a
    half turn (an ambiguous rotation the wrist may take either way)."""
    z = np.array([direction[0], direction[1], 0.0])
    z /= max(float(np.linalg.norm(z)), 1e-9)
    x = np.array([0.0, 0.0, -1.0])
    return np.column_stack([x, np.cross(z, x), z])


@dataclass
class PartExpert:
    """Waypoint expert for an articulated part (`open` a drawer, `turnon` a knob): `act(state)` returns the
    next 7-D OSC_POSE delta action. Subclasses give each phase's target."""

    part: str  # BDDL name of the part (`LiberoState.parts` key)
    phase: int = 0
    _in_phase: int = 0
    heading: float | None = HEADING_Y  # grip site heading commanded now (eef_yaw convention), for pointing-down phases

    PHASES: ClassVar[tuple[str, ...]] = ()
    TIMED: ClassVar[dict[str, int]] = {}  # phases that wait a number of steps rather than reach a waypoint

    def reset(self) -> None:
        self.phase, self._in_phase, self.heading = 0, 0, HEADING_Y

    @property
    def done(self) -> bool:
        return self.phase >= len(self.PHASES) - 1

    def _target(self, s: LiberoState) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(waypoint, grip site orientation, gripper command, tolerance) of the current phase."""
        raise NotImplementedError

    def act(self, s: LiberoState) -> np.ndarray:
        """The next action (float32 (7,)) for state `s`; advances the phase when its waypoint is reached
        with the hand oriented, its steps are waited out, or after PHASE_LIMIT steps."""
        if self.part not in s.parts:
            raise LiberoError(f"part = {self.part!r} is not an articulated part of the scene; parts: {sorted(s.parts)}")
        name = self.PHASES[self.phase]
        target, orientation, grip, tol = self._target(s)
        turn = _rotvec(orientation @ s.eef_rot.T)
        self._in_phase += 1
        if name in self.TIMED:
            advance = self._in_phase >= self.TIMED[name]
        else:
            reached = float(np.linalg.norm(target - s.eef_pos)) < tol and float(np.linalg.norm(turn)) < 0.15
            advance = reached or self._in_phase >= PHASE_LIMIT
        if not self.done and advance:
            self.phase, self._in_phase = self.phase + 1, 0
        a = np.zeros(7)
        a[:3] = np.clip((target - s.eef_pos) / POS_SCALE, -CARRY_SPEED, CARRY_SPEED)
        a[3:6] = np.clip(turn / ROT_SCALE, -1.0, 1.0)
        a[6] = grip
        return a.astype(np.float32)


class DrawerExpert(PartExpert):
    """Opens a drawer by its handle, the hand facing the drawer (see the module docstring)."""

    PHASES = ("high", "front", "narrow", "reach", "close", "pull")
    TIMED = {"narrow": NARROW_STEPS, "close": CLOSE_STEPS}

    def _target(self, s: LiberoState) -> tuple[np.ndarray, np.ndarray, float, float]:
        part = s.parts[self.part]
        out = part.open_dir
        orientation = facing(-out)
        self.heading = None  # not pointing down
        name = self.PHASES[self.phase]
        if name == "high":
            return part.handle + PRE_REACH * out + np.array([0.0, 0.0, HAND_RISE]), orientation, -1.0, 3 * TOL
        if name == "front":
            return part.handle + PRE_REACH * out, orientation, -1.0, TOL
        if name == "narrow":  # each closing step narrows the fingers by about 1 cm
            return part.handle + PRE_REACH * out, orientation, 1.0, np.inf
        if name == "reach":  # a zero gripper command holds the opening
            return part.handle.copy(), orientation, 0.0, GRASP_TOL
        if name == "close":
            return part.handle.copy(), orientation, 1.0, np.inf
        return part.handle + PULL_AHEAD * out, orientation, 1.0, 0.0  # pull until the episode ends


class KnobExpert(PartExpert):
    """Turns a stove knob on: grasps its fin over the pivot and turns the wrist (see the module docstring)."""

    PHASES = ("above", "down", "close", "turn")
    TIMED = {"close": CLOSE_STEPS}

    def _target(self, s: LiberoState) -> tuple[np.ndarray, np.ndarray, float, float]:
        part = s.parts[self.part]
        # fingers close across the fin: along world y when the fin lies along x, and the other way round
        extent = part.hi - part.lo
        base = HEADING_Y if extent[0] >= extent[1] else 0.0
        grasp = np.array([part.pos[0], part.pos[1], part.hi[2] - KNOB_BELOW_TOP])
        name = self.PHASES[self.phase]
        self.heading = base + (part.opening * float(np.sign(part.axis[2] or 1.0)) * KNOB_TURN if name == "turn" else 0.0)
        orientation = yaw_rotation(self.heading - HEADING_Y) @ DOWN_Y
        if name == "above":
            return grasp + np.array([0.0, 0.0, HOVER]), orientation, -1.0, TOL
        if name == "down":
            return grasp, orientation, -1.0, GRASP_TOL
        return grasp, orientation, 1.0, 0.0 if name == "turn" else np.inf


OPEN_MARGIN = 0.01  # a drawer to put something in is pulled this far past LIBERO's open threshold, m
HANDLE_TO_INSIDE = 0.03  # from a drawer handle's centre to the inside of the drawer's front wall, m
DRAWER_FLOOR = 0.01  # a drawer's floor above the lowest point of its collision geoms, m
CLEAR_MARGIN = 0.02  # a grasped object is slid this far clear of an overhanging drawer before it is lifted, m


def clearing_shift(center: np.ndarray, half: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   margin: float = CLEAR_MARGIN) -> np.ndarray:
    """The shortest horizontal move along a world axis that takes a footprint (`center`, `half`: (2,)) at least
    `margin` clear of the box `lo`..`hi` ((2,) corners); zero when they are apart already."""
    a_lo, a_hi = center - half, center + half
    if np.any(a_hi <= lo - margin) or np.any(a_lo >= hi + margin):
        return np.zeros(2)
    moves = [(hi[k] + margin - a_lo[k], k) for k in range(2)] + [(lo[k] - margin - a_hi[k], k) for k in range(2)]
    d, k = min(moves, key=lambda m: abs(m[0]))
    shift = np.zeros(2)
    shift[k] = d
    return shift


@dataclass
class InDrawerExpert(PickPlaceExpert):
    """Pick-and-place into an open drawer (`task.target` is the drawer's BDDL region, a `LiberoState.parts`
    key): the grasped object is first slid clear of the drawer's footprint at the height it was grasped, so
    lifting it does not hit the drawer's underside (the top drawer, pulled out, hangs over the table in front of
    the cabinet); it is carried above the drawer's top and released over the drawer's floor, halfway along the
    part pulled out of the cabinet."""

    _clear: np.ndarray | None = None  # the slide-clear waypoint, fixed when the slide starts
    heading: float | None = HEADING_Y  # the open drawer over the object is not a compartment: fingers along y

    PHASES: ClassVar[tuple[str, ...]] = ("above", "down", "close", "clear", "lift", "over", "lower", "open", "up",
                                         "done")
    CARRYING: ClassVar[tuple[str, ...]] = ("clear", "lift", "over", "lower")
    MOVING: ClassVar[tuple[str, ...]] = ("above", "clear", "lift")

    def reset(self) -> None:
        super().reset()
        self._clear, self.heading = None, HEADING_Y

    def _restart(self) -> None:
        self._clear = None

    def _goal_spot(self, s: LiberoState) -> tuple[np.ndarray, float]:
        part = s.parts[self.task.target]
        pulled = abs(part.qpos)  # how far the drawer is out (LIBERO's drawers are closed at joint position 0), m
        return (part.handle - (HANDLE_TO_INSIDE + pulled / 2) * part.open_dir)[:2], float(part.lo[2] + DRAWER_FLOOR)

    def _carry_floor(self, s: LiberoState) -> float:
        return max(self._pick_bottom, float(s.parts[self.task.target].hi[2]))  # above the drawer's top

    def _target(self, s: LiberoState) -> tuple[np.ndarray, float, float]:
        if self.PHASES[self.phase] != "clear":
            return super()._target(s)
        if self._clear is None:
            part, i = s.parts[self.task.target], s.index[self.task.obj]
            overhang = part.lo[2] > s.center[i, 2] - s.half[i, 2]  # the drawer is above the object's bottom
            shift = np.zeros(2)
            if overhang:
                shift = clearing_shift(s.center[i, :2], s.half[i, :2], part.lo[:2], part.hi[:2])
            self._clear = s.eef_pos + np.array([shift[0], shift[1], 0.01])
        return self._clear.copy(), 1.0, TOL


@dataclass
class DrawerPlaceExpert:
    """`in` a closed drawer's region: opens the drawer with `DrawerExpert` (pulled OPEN_MARGIN past LIBERO's
    threshold), lets go of the handle, backs away PRE_REACH and rises HAND_RISE, turns to point down on its way
    to HOVER above the drawer's top over the grasp point, then puts the object inside with `InDrawerExpert`.
    Going from the drawer straight to the grasp pushed the drawer half shut (the fingers, turning to point down,
    swept its front). The opening hand faces the drawer, so these demos are 7-D only, like the drawer's."""

    obj: str  # entity to put in the drawer
    part: str  # the drawer's BDDL region (`LiberoState.parts` key)
    stage: str = "open"  # "open", "let_go", "back", "rise", "over", "place"
    _in_stage: int = 0
    _opener: DrawerExpert = field(init=False)
    _placer: InDrawerExpert = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.stage, self._in_stage = "open", 0
        self._opener = DrawerExpert(self.part)
        self._placer = InDrawerExpert(PickPlaceTask(obj=self.obj, target=self.part, relation="in"))

    @property
    def heading(self) -> float | None:
        return self._placer.heading if self.stage == "place" else None

    @property
    def done(self) -> bool:
        return self.stage == "place" and self._placer.done

    def act(self, s: LiberoState) -> np.ndarray:
        """The next action (float32 (7,)) for state `s`."""
        if self.part not in s.parts:
            raise LiberoError(f"part = {self.part!r} is not an articulated part of the scene; parts: {sorted(s.parts)}")
        part = s.parts[self.part]
        out = part.open_dir
        if self.stage == "open" and part.opening * (part.qpos - part.open_at) >= OPEN_MARGIN:
            # a drawer found open goes straight to the placing; one just pulled open is let go of first
            self.stage, self._in_stage = ("let_go" if self._opener.phase > 0 else "place"), 0
        if self.stage == "open":
            return self._opener.act(s)
        self._in_stage += 1
        if self.stage == "let_go":
            target, grip, orientation = part.handle.copy(), -1.0, facing(-out)
            if self._in_stage >= OPEN_STEPS:
                self.stage, self._in_stage = "back", 0
        elif self.stage in ("back", "rise", "over"):
            target, grip, orientation = part.handle + PRE_REACH * out, -1.0, facing(-out)
            if self.stage == "rise":
                target = target + np.array([0.0, 0.0, HAND_RISE])
            if self.stage == "over":
                target = np.array([*self._placer._grasp_point(s)[:2], part.hi[2] + HOVER])
                orientation = self._placer._orientation()
            if float(np.linalg.norm(target - s.eef_pos)) < 3 * TOL or self._in_stage >= PHASE_LIMIT:
                self.stage, self._in_stage = {"back": "rise", "rise": "over", "over": "place"}[self.stage], 0
        else:
            return self._placer.act(s)
        a = np.zeros(7)
        a[:3] = np.clip((target - s.eef_pos) / POS_SCALE, -1.0, 1.0)
        a[3:6] = np.clip(_rotvec(orientation @ s.eef_rot.T) / ROT_SCALE, -1.0, 1.0)
        a[6] = grip
        return a.astype(np.float32)


Expert = PickPlaceExpert | DrawerExpert | KnobExpert | DrawerPlaceExpert


def expert_for(env: "LiberoEnv") -> Expert:
    """The scripted expert for the current episode of a `LiberoEnv` (privileged BDDL goal): `DrawerExpert`
    for `open` of a drawer region, `DrawerPlaceExpert` for `in` a drawer region, `KnobExpert` for `turnon` of
    a stove, else the pick-and-place expert.

    Raises:
        LiberoError: a goal none of the experts handles (several predicates, `close`, pushing...).
    """
    goal, state = env.goal, env.state()
    if len(goal) == 1 and len(goal[0]) == 3 and goal[0][0] == "in" and goal[0][2] in state.parts:
        part = state.parts[goal[0][2]]
        if part.kind == "slide" and goal[0][1] in state.names:
            return DrawerPlaceExpert(goal[0][1], goal[0][2])
    if len(goal) == 1 and len(goal[0]) == 2 and goal[0][1] in state.parts:
        predicate, part = goal[0]
        kind = state.parts[part].kind
        if predicate == "open" and kind == "slide":
            return DrawerExpert(part)
        if predicate == "turnon" and kind == "hinge":
            return KnobExpert(part)
    regions = env.control_env.env.parsed_problem["regions"]
    return PickPlaceExpert(pick_place_task(goal, regions, state.names))


@dataclass(frozen=True)
class ExpertEpisode:
    """The outcome of one expert rollout."""

    success: bool  # `check_success()` held at the end
    steps: int  # control steps taken (after settling)
    seconds: float  # wall time of the rollout, reset included
    step_ms: float  # mean wall time of one control step (expert and env), ms
    states: tuple[LiberoState, ...] = ()  # the states it passed through, first to last (with `record_states`)


def rollout_expert(env: "LiberoEnv", scenario: LiberoScenario, max_steps: int | None = None,
                   record_states: bool = False) -> ExpertEpisode:
    """Reset `env` (a `LiberoEnv`) to `scenario` and run its scripted expert (`expert_for`) until success or
    the horizon (`max_steps`, default the env's); with `record_states` the episode keeps its states."""
    import time

    t0 = time.perf_counter()
    env.reset_to(scenario)
    expert = expert_for(env)
    horizon = max_steps or env.max_steps
    t1 = time.perf_counter()
    state = env.state()
    states = [state]
    success = state.success
    while not success and env.steps < horizon:
        _, _, success, _, _ = env.step(expert.act(state))
        state = env.state()
        if record_states:
            states.append(state)
    t2 = time.perf_counter()
    return ExpertEpisode(bool(success), env.steps, t2 - t0, 1000.0 * (t2 - t1) / max(env.steps, 1),
                         tuple(states) if record_states else ())
