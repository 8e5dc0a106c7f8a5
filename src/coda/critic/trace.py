"""Facts about an episode read from its privileged state trace, and a compact summary in words.

`trace_facts(states, spec)` evaluates the simulator's predicates once per step and keeps what critics and
the verifier reason about: which objects were grasped, lifted, touched, tipped over or moved, when and how
the target was let go (opened on purpose, or slipped), where it ended, how far the staged potential of the
canonical plan got, the drawer's travel, the gripper's path. `summarize(facts)` writes it as a few lines
for a vision-language critic's prompt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.scene.spec import ScenarioSpec
from coda.shaping.resolve import entity_words
from coda.shaping.stages import OVER_FRACTION
from coda.shaping.text2potential import PROGRESS_CAP, StagedPotential, canonical_plan, parse_plan

TILT_COS = math.cos(math.radians(45))  # an object whose up axis leans more than 45 degrees has tipped over
MOVED = 0.03  # an object counts as moved when its centre travelled this far horizontally, m
CLOSED = 0.5  # grip command below this = the jaws were commanded shut
HANDLE_NEAR = 0.07  # jaws shut this close to a drawer handle's centre (bar half length 4.5 cm) count as a try, m
CLOSE_MARGIN = 0.05  # jaws shut within an object's half width plus this count as a try to grasp it, m


@dataclass(frozen=True)
class Release:
    """The target stopped being grasped at `step`."""

    step: int
    commanded: bool  # the jaws were commanded open (a release), else the object slipped out
    over_destination: bool  # it was horizontally over the destination just before
    height: float  # the object's bottom above the table just before, m
    dist: float  # horizontal distance to the destination just before, m


@dataclass(frozen=True)
class TraceFacts:
    """What happened in an episode, from predicates over its state trace (see the module docstring)."""

    spec: ScenarioSpec
    steps: int  # control steps (states - 1)
    success: bool  # the goal holds in the final state
    target: str | None  # the object the goal moves (None for drawer goals)
    destination: str | None  # container / object / region it must reach
    drawer: str | None  # the drawer of a drawer goal
    grasped: dict[str, int]  # entity -> number of states in which it was grasped
    lifted: frozenset[str]  # objects held with their bottom >= 3 cm above the table at some point
    closed_near: frozenset[str]  # objects/drawers the jaws were commanded shut next to, without grasping
    touched: frozenset[str]  # entities a finger touched (the table excluded)
    tilted: frozenset[str]  # objects that tipped over
    moved: dict[str, float]  # object -> largest horizontal displacement from its start, m
    releases: tuple[Release, ...]  # times the target stopped being grasped
    rests_in: str | None  # entity the target rests in/on/at at the end (None = the table)
    end_dist: float | None  # final horizontal target-destination distance, m
    stage_kinds: tuple[str, ...]  # stage kinds of the canonical plan
    max_stage: int  # furthest canonical stage whose predicate held at some step (0 = none)
    phi: np.ndarray = field(repr=False)  # Φ of the canonical plan along the trace
    min_dist: dict[str, float] = field(default_factory=dict)  # entity -> smallest gripper distance, m
    gripper_path: float = 0.0  # length of the gripper's path, m
    drawer_fractions: tuple[float, float, float, float] | None = None  # start, end, min, max

    @property
    def stage_reached(self) -> str:
        """Kind of the furthest canonical stage reached, or "none"."""
        return self.stage_kinds[self.max_stage - 1] if self.max_stage else "none"

    def words(self, name: str) -> str:
        """`obj0 (small red cube)`-style name with words."""
        return f"{name} ({entity_words(self.spec.entity(name))})"


def _tilted(s: Any, i: int) -> bool:
    return s.types[i] != "sphere" and abs(float(s.rot[i][2, 2])) < TILT_COS


def _rests_in(P: Any, s: Any, spec: ScenarioSpec, o: str) -> str | None:
    if P.grasped(s, o):
        return None
    for c in spec.containers:
        if P.inside(s, o, c.name):
            return c.name
    for b in spec.objects:
        if b.name != o and P.on(s, o, b.name):
            return b.name
    for r in spec.regions:
        if P.at_region(s, o, r.name):
            return r.name
    return None


@dataclass
class _Tally:
    """Facts gathered step by step while a tabletop trace is read (see `trace_facts`)."""

    P: Any  # predicate module
    objects: list[str]
    handles: list[str]  # drawers
    start: dict[str, np.ndarray]  # object -> horizontal position in the first state
    target: str | None
    dest: str | None
    transport: bool  # an `in` / `on` goal: the target is carried, so letting go of it is a release
    grasped: dict[str, int] = field(default_factory=dict)
    lifted: set[str] = field(default_factory=set)
    closed_near: set[str] = field(default_factory=set)
    touched: set[str] = field(default_factory=set)
    tilted: set[str] = field(default_factory=set)
    moved: dict[str, float] = field(default_factory=dict)
    min_dist: dict[str, float] = field(default_factory=dict)
    releases: list[Release] = field(default_factory=list)
    path: float = 0.0

    def observe(self, t: int, s: Any, prev: Any) -> None:
        """Fold in state `s` (step `t`), `prev` being the state before it (None for the first)."""
        P, objects, handles = self.P, self.objects, self.handles
        self.touched |= (set(s.finger_contacts[0]) | set(s.finger_contacts[1])) - {"table"}
        for n in (*objects, *handles):
            d = P.gripper_distance(s, n)
            self.min_dist[n] = min(self.min_dist[n], d)
            held = P.grasped(s, n)
            if held:
                self.grasped[n] = self.grasped.get(n, 0) + 1
            near = HANDLE_NEAR if n in handles else float(max(s.size[s.row(n), :2])) + CLOSE_MARGIN
            if not held and s.grip_cmd < CLOSED and d <= near:
                self.closed_near.add(n)
        for o in objects:
            i = s.row(o)
            self.moved[o] = max(self.moved[o], float(np.linalg.norm(s.pos[i, :2] - self.start[o])))
            if _tilted(s, i):
                self.tilted.add(o)
            if P.lifted(s, o, 0.03):
                self.lifted.add(o)
        if prev is not None:
            self.path += float(np.linalg.norm(s.gripper_pos - prev.gripper_pos))
            target, dest = self.target, self.dest
            if self.transport and P.grasped(prev, target) and not P.grasped(s, target):
                dist = P.xy_distance(prev, target, dest)
                j = prev.row(dest)
                over = dist <= OVER_FRACTION * float(min(prev.size[j, 0], prev.size[j, 1]))
                self.releases.append(Release(t, s.grip_cmd >= CLOSED, bool(over), float(P.bottom(prev, target)),
                                             float(dist)))


def trace_facts(states: Sequence[Any], spec: ScenarioSpec, predicates: Any = None) -> TraceFacts:
    """Read the facts of an episode from its state trace (at least one state).

    Args:
        states: privileged states, the initial one first.
        spec: the scenario the episode ran in.
        predicates: predicate module (default: the tabletop simulator's).

    Raises:
        ValueError: empty trace.
    """
    if not states:
        raise ValueError("trace_facts needs at least one state")
    pot = StagedPotential(parse_plan(canonical_plan(spec), spec), spec, predicates)
    P = pot.ctx.P
    g = spec.goal[0]
    drawer = g.args[0] if g.name == "drawer_fraction" else None
    target = None if drawer else g.args[0]
    dest = None if drawer else g.args[1]
    objects = [o.name for o in spec.objects]
    handles = [d.name for d in spec.drawers]
    s0 = states[0]
    tally = _Tally(
        P=P,
        objects=objects,
        handles=handles,
        start={o: s0.pos[s0.row(o), :2].copy() for o in objects},
        target=target,
        dest=dest,
        transport=g.name in ("in", "on"),  # pushing touches with both fingers too: not a grasp to let go of
        moved=dict.fromkeys(objects, 0.0),
        min_dist={n: math.inf for n in (*objects, *handles)},
    )
    max_stage = 0
    phis = np.empty(len(states))
    prev = None
    for t, s in enumerate(states):
        k = pot.stages_done(s)
        max_stage = max(max_stage, k)
        phis[t] = (k + min(pot.progress(s, k), PROGRESS_CAP)) / pot.K
        tally.observe(t, s, prev)
        prev = s
    last = states[-1]
    fractions = None
    if drawer:
        fr = [P.drawer_fraction(s, drawer) for s in states]
        fractions = (fr[0], fr[-1], min(fr), max(fr))
    return TraceFacts(
        spec=spec,
        steps=len(states) - 1,
        success=bool(P.goal_satisfied(last, spec)),
        target=target,
        destination=dest,
        drawer=drawer,
        grasped=tally.grasped,
        lifted=frozenset(tally.lifted),
        closed_near=frozenset(tally.closed_near),
        touched=frozenset(tally.touched),
        tilted=frozenset(tally.tilted),
        moved=tally.moved,
        releases=tuple(tally.releases),
        rests_in=_rests_in(P, last, spec, target) if target else None,
        end_dist=float(P.xy_distance(last, target, dest)) if target and dest else None,
        stage_kinds=tuple(st.kind for st in pot.program.stages),
        max_stage=max_stage,
        phi=phis,
        min_dist=tally.min_dist,
        gripper_path=tally.path,
        drawer_fractions=fractions,
    )


def summarize(f: TraceFacts) -> str:
    """The facts as a few short lines (for a critic prompt or a report)."""
    lines = [f"{f.steps} steps; goal {'reached' if f.success else 'not reached'}; "
             f"furthest stage of the plan: {f.stage_reached} ({f.max_stage}/{len(f.stage_kinds)}); "
             f"gripper travelled {f.gripper_path:.2f} m"]
    if f.grasped:
        lines.append("grasped: " + ", ".join(f"{f.words(n)} for {c} steps" for n, c in sorted(f.grasped.items())))
    else:
        lines.append("grasped nothing")
    if f.closed_near:
        lines.append("jaws closed next to, without holding: " + ", ".join(f.words(n) for n in sorted(f.closed_near)))
    if f.lifted:
        lines.append("lifted: " + ", ".join(f.words(n) for n in sorted(f.lifted)))
    for r in f.releases:
        how = "released" if r.commanded else "slipped out"
        where = "over the destination" if r.over_destination else f"{r.dist:.2f} m from the destination"
        lines.append(f"target {how} at step {r.step}, {r.height:.2f} m up, {where}")
    moved = [n for n, d in f.moved.items() if d >= MOVED]
    if moved:
        lines.append("moved: " + ", ".join(f"{f.words(n)} by {f.moved[n]:.2f} m" for n in moved))
    if f.tilted:
        lines.append("tipped over: " + ", ".join(f.words(n) for n in sorted(f.tilted)))
    other = sorted(f.touched - {f.target, f.drawer} - {None})
    if other:
        lines.append("fingers touched: " + ", ".join(other))
    if f.target is not None:
        where = f"rests in/on {f.words(f.rests_in)}" if f.rests_in else "is not in or on anything"
        lines.append(f"at the end the target {f.words(f.target)} {where}, {f.end_dist:.2f} m from "
                     f"{f.words(f.destination or '')}")
    if f.drawer_fractions is not None:
        a, b, lo, hi = f.drawer_fractions
        lines.append(f"drawer {f.drawer} opening fraction {a:.2f} -> {b:.2f} (range {lo:.2f}..{hi:.2f})")
    return "\n".join(lines)


