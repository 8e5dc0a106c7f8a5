"""The `libero-privileged` critic: diagnoses a failed LIBERO episode from its `LiberoState` trace and BDDL.

**Scene factors** are what a scenario's BDDL changes relative to its task's official BDDL
(`scenario_factors`, with `undo_factor` and `transplant_factor`, in `coda.sim.libero.factors`): an
object's initial region (reassigned, moved or widened: `position`), the goal (`task`), or the instruction
alone (`instruction`).

**Trace facts** (`libero_trace_facts`) come from `LiberoPredicates` with the goal pair (so `in` / `on`
between the goal's object and target is LIBERO's own `check_success()`): grasps, lifts, releases of the
target, other objects grasped, where the target rests at the end, and how far the canonical stage program
(reach → grasp → lift → carry → place) got.

The critic applies a fixed decision list, first match wins:

    wrong_target          the target ends in/on an entity other than the destination (and than where it began)
    wrong_object          another object was held for 2+ states while the target never was
    slip_during_transport the target left jaws still commanded shut, away from the destination
    imprecise_placement   released over the destination or within 12 cm of it, but the goal does not hold
    premature_release     released further away
    knocked_over          an object tipped over (its up axis turned more than 45 degrees)
    imprecise_placement   the target was carried over the destination and never put down
    detour / no_progress  the target was lifted but not brought over the destination (path >= 1.2 m: detour)
    missed_grasp          the jaws closed next to the target without holding it
    collision             the fingers touched an entity that is not part of the goal
    detour                the gripper travelled 1.2 m or more without getting anywhere
    no_progress           anything else

Implicated factors are the scenario's factors whose kind can explain the mode (`RELEVANT`), the task and
instruction first, then positions of the target, the destination and the other implicated objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda.critic.base import EpisodeRecord
from coda.critic.diagnosis import CriticResult, Diagnosis, DiagnosisRejected, SceneFactor
from coda.critic.privileged import DETOUR_PATH, MIN_GRASP_STEPS, release_or_tip
from coda.critic.trace import CLOSE_MARGIN, TILT_COS
from coda.shaping.program import ProgramError, Stage, StageProgram
from coda.shaping.resolve import NamedEntities, PlanParseError
from coda.shaping.text2potential import PROGRESS_CAP, PlanRejected, StagedPotential, parse_plan
from coda.sim.libero import suites as S
from coda.sim.libero.errors import LiberoError
from coda.sim.libero.experts import pick_place_task
from coda.sim.libero.factors import scenario_factors
from coda.sim.libero.predicates import LiberoPredicates, goal_pair, libero_kinds, libero_predicates
from coda.sim.libero.scenario import LiberoScenario
from coda.sim.libero.state import SKIPPED_FIXTURES, LiberoState, category_words
from coda.sim.libero.suites import bddl_regions

REGROUP_STEPS = 3  # a grasp lost for fewer states than this and taken again is one grasp (contacts flicker)

# Which factor kinds can explain each failure mode, most likely first.
RELEVANT: dict[str, tuple[str, ...]] = {
    "missed_grasp": ("position",),
    "slip_during_transport": ("position",),
    "wrong_object": ("task", "instruction", "position"),
    "wrong_target": ("task", "instruction", "position"),
    "knocked_over": ("position",),
    "collision": ("position",),
    "no_progress": ("task", "instruction", "position"),
    "detour": ("position", "task", "instruction"),
    "premature_release": ("position",),
    "imprecise_placement": ("position",),
    "drawer_not_operated": ("task", "instruction", "position"),
    "other": ("task", "instruction", "position"),
}


# ---- trace facts -------------------------------------------------------------------------------------


def libero_stage_program(goal: Sequence[Sequence[str]], regions: dict[str, dict], names: Sequence[str],
                         lift: float = 0.05) -> StageProgram:
    """The canonical stage program of a one-predicate `in` / `on` goal: reach, grasp, lift (`lift` m above
    the table top), carry over the target, place in / on it.

    Raises:
        LiberoError: the goal is not one `in` / `on` predicate between entities of the scene.
    """
    task = pick_place_task([list(g) for g in goal], regions, tuple(names))
    o, t = task.obj, task.target
    return StageProgram(stages=(Stage(kind="reach", args=(o,)), Stage(kind="grasp", args=(o,)),
                                Stage(kind="lift", args=(o,), value=lift), Stage(kind="carry", args=(o, t)),
                                Stage(kind="place", args=(o, t))),
                        source=f"{task.relation}({o}, {t})")


def libero_entities(scenario: LiberoScenario, first: LiberoState | None = None) -> NamedEntities:
    """The scenario's entities as a stage plan names them (`coda.shaping.resolve.NamedEntities`): each
    entity's words ("alphabet soup") and its stage kind (`libero_kinds`). Read from `first` (an episode's
    initial state) when given, else from the BDDL alone (its objects, then its fixtures but the table and
    floor, as the environment lists them). Raises LiberoError for a goal that is not one `in` / `on`."""
    text = scenario.bddl_text()
    goal, regions = S.bddl_goal(text), bddl_regions(text)
    if first is not None:
        names, words = tuple(first.names), dict(zip(first.names, first.texts))
    else:
        fixtures = {n: c for n, c in S.bddl_fixtures(text).items() if not any(w in c for w in SKIPPED_FIXTURES)}
        cats = {**S.bddl_objects(text), **fixtures}
        names, words = tuple(cats), {n: category_words(c) for n, c in cats.items()}
    return NamedEntities(kinds=libero_kinds(goal, regions, names), words=words)


def libero_plan_potential(plan: str, first: LiberoState, scenario: LiberoScenario) -> StagedPotential:
    """Text2potential on LIBERO: a stage plan in words ("1. reach the alphabet soup 2. grasp it ...") parsed
    against the scenario's entities (`libero_entities`) into a stage program whose predicates are LIBERO's
    (`LiberoPredicates`: `in` / `on` of the BDDL goal pair are its own `check_success()`), with the table top
    read from `first`.

    Raises:
        PlanParseError: a step or phrase that maps to no stage or entity (the message names the words).
        ProgramError: a stage over an entity of the wrong kind.
        LiberoError: the goal is not one `in` / `on` predicate.
    """
    scene = libero_entities(scenario, first)
    return StagedPotential(parse_plan(plan, scene), None, libero_predicates(first, scenario), kinds=dict(scene.kinds))


def try_libero_plan(plan: str, first: LiberoState, scenario: LiberoScenario) -> StagedPotential | PlanRejected:
    """Like `libero_plan_potential`, but a plan that cannot be compiled comes back as a PlanRejected record."""
    try:
        return libero_plan_potential(plan, first, scenario)
    except PlanParseError as e:
        return PlanRejected(text=plan, reason=str(e), phrase=e.phrase)
    except (ProgramError, LiberoError) as e:
        return PlanRejected(text=plan, reason=str(e))


def libero_potential(first: LiberoState, scenario: LiberoScenario) -> StagedPotential:
    """Φ of the canonical stage program of the scenario's goal, with predicates whose table top is read from
    `first` (an episode's initial state). Raises LiberoError for a goal that is not one `in` / `on`."""
    text = scenario.bddl_text()
    goal, regions = S.bddl_goal(text), bddl_regions(text)
    return StagedPotential(libero_stage_program(goal, regions, first.names), None, libero_predicates(first, scenario),
                           kinds=libero_kinds(goal, regions, first.names))


@dataclass(frozen=True)
class LiberoRelease:
    """The target stopped being grasped after state `step - 1`."""

    step: int
    commanded: bool  # the jaws were commanded open, else it slipped out of shut jaws
    over_destination: bool  # its centre was over the destination's box just before
    height: float  # its bottom above the table top just before, m
    dist: float  # horizontal distance to the destination just before, m


@dataclass(frozen=True)
class LiberoTraceFacts:
    """What happened in a LIBERO episode, from predicates over its state trace (see the module docstring)."""

    scenario: LiberoScenario
    steps: int  # control steps (states - 1)
    success: bool  # the BDDL goal holds in the last state
    target: str  # the object the goal moves
    destination: str  # the entity it must end in / on
    relation: str  # "in" or "on"
    texts: dict[str, str]  # entity -> words ("alphabet soup")
    grasped: dict[str, int]  # entity -> states in which it was grasped
    lifted: frozenset[str]  # entities held with their bottom >= 3 cm above the table top
    closed_near: frozenset[str]  # entities the jaws were commanded shut next to without holding
    touched: frozenset[str]  # entities a finger touched
    tilted: frozenset[str]  # movable entities whose up axis turned more than 45 degrees
    moved: dict[str, float]  # movable entity -> largest horizontal displacement from its start, m
    releases: tuple[LiberoRelease, ...]  # times the target was let go
    other_grasped: tuple[str, ...]  # movable entities but the target and destination held 2+ states, most first
    rests_in: str | None  # entity the target rests in/on at the end (None: the table, or still held)
    rested_in: str | None  # entity it rested in/on at the start
    end_dist: float  # final horizontal target-destination distance, m
    stage_kinds: tuple[str, ...]  # stage kinds of the canonical program
    max_stage: int  # furthest stage whose predicate held at some state (0 = none)
    phi: np.ndarray = field(repr=False)  # Φ of the canonical program along the trace
    min_dist: dict[str, float] = field(default_factory=dict)  # entity -> smallest grip-site distance, m
    gripper_path: float = 0.0  # length of the grip site's path, m
    program: StageProgram | None = field(default=None, repr=False)  # the canonical stage program

    @property
    def stage_reached(self) -> str:
        """Kind of the furthest stage reached, or "none"."""
        return self.stage_kinds[self.max_stage - 1] if self.max_stage else "none"

    @property
    def target_lifted(self) -> bool:
        return self.target in self.lifted

    @property
    def target_displacement(self) -> float:
        """The target's largest horizontal displacement from its start, m."""
        return self.moved.get(self.target, 0.0)

    def words(self, name: str) -> str:
        """`alphabet_soup_1 (alphabet soup)`."""
        return f"{name} ({self.texts.get(name, name)})"


def _resting_place(P: LiberoPredicates, s: LiberoState, obj: str, dest: str) -> str | None:
    if P.grasped(s, obj):
        return None
    if s.success:
        return dest
    for e in s.names:
        if e not in (obj, dest) and (P.inside(s, obj, e) or P.on(s, obj, e)):
            return e
    return None


def _grasp_intervals(held: Sequence[bool]) -> list[tuple[int, int]]:
    """[start, end) runs of held states, runs separated by fewer than REGROUP_STEPS states merged."""
    runs: list[list[int]] = []
    for t, h in enumerate(held):
        if not h:
            continue
        if runs and t - runs[-1][1] < REGROUP_STEPS:
            runs[-1][1] = t + 1
        else:
            runs.append([t, t + 1])
    return [(a, b) for a, b in runs]


@dataclass
class _LiberoTally:
    """Facts gathered state by state while a LIBERO trace is read (see `libero_trace_facts`)."""

    P: LiberoPredicates
    first: LiberoState  # the state after reset: names, start poses
    target: str
    moved: dict[str, float]  # movable entity -> largest horizontal displacement so far, m
    min_dist: dict[str, float]
    grasped: dict[str, int] = field(default_factory=dict)
    lifted: set[str] = field(default_factory=set)
    closed_near: set[str] = field(default_factory=set)
    touched: set[str] = field(default_factory=set)
    tilted: set[str] = field(default_factory=set)
    held_target: list[bool] = field(default_factory=list)
    path: float = 0.0

    def observe(self, s: LiberoState, prev: LiberoState | None) -> None:
        """Fold in state `s`, `prev` being the state before it (None for the first)."""
        P, s0 = self.P, self.first
        self.touched |= s.left_touch | s.right_touch
        shut = P.grip_closed(s) > 0.5
        for i, n in enumerate(s0.names):
            d = P.gripper_distance(s, n)
            self.min_dist[n] = min(self.min_dist[n], d)
            held = P.grasped(s, n)
            if held:
                self.grasped[n] = self.grasped.get(n, 0) + 1
                if P.bottom(s, n) >= 0.03:
                    self.lifted.add(n)
            elif shut and d <= float(max(s.half[i, :2])) + CLOSE_MARGIN:
                self.closed_near.add(n)
            if n in self.moved:
                self.moved[n] = max(self.moved[n], float(np.linalg.norm(s.center[i, :2] - s0.center[i, :2])))
                if float(s.rot[i][:, 2] @ s0.rot[i][:, 2]) < TILT_COS:
                    self.tilted.add(n)
        self.held_target.append(P.grasped(s, self.target))
        if prev is not None:
            self.path += float(np.linalg.norm(s.eef_pos - prev.eef_pos))


def _releases(P: LiberoPredicates, states: Sequence[LiberoState], held_target: Sequence[bool], target: str,
              dest: str) -> list[LiberoRelease]:
    """The times the target was let go (a grasp that lasts to the end is no release)."""
    releases = []
    for _, end in _grasp_intervals(held_target):
        if end >= len(states):
            continue  # still held at the end
        prev, s = states[end - 1], states[end]
        j = prev.index[dest]
        over = bool(np.all(np.abs(prev.center[prev.index[target], :2] - prev.center[j, :2]) <= prev.half[j, :2]))
        releases.append(LiberoRelease(end, P.grip_closed(s) <= 0.5, over, P.bottom(prev, target),
                                      P.xy_distance(prev, target, dest)))
    return releases


def libero_trace_facts(states: Sequence[LiberoState], scenario: LiberoScenario) -> LiberoTraceFacts:
    """Read the facts of a LIBERO episode from its state trace (the state after reset first).

    Raises:
        LiberoError: empty trace, or a goal that is not one `in` / `on` predicate.
    """
    if not states:
        raise LiberoError("libero_trace_facts needs at least one state")
    text = scenario.bddl_text()
    goal = S.bddl_goal(text)
    s0 = states[0]
    target, dest = goal_pair(goal, bddl_regions(text), s0.names)
    pot = libero_potential(s0, scenario)
    P = pot.ctx.P
    names = s0.names
    movable = [n for n, fx in zip(names, s0.fixture) if not fx]
    tally = _LiberoTally(P, s0, target, moved=dict.fromkeys(movable, 0.0), min_dist=dict.fromkeys(names, math.inf))
    phis = np.empty(len(states))
    max_stage = 0
    for t, s in enumerate(states):
        k = pot.stages_done(s)
        max_stage = max(max_stage, k)
        phis[t] = (k + min(pot.progress(s, k), PROGRESS_CAP)) / pot.K
        tally.observe(s, states[t - 1] if t else None)
    releases = _releases(P, states, tally.held_target, target, dest)
    grasped = tally.grasped
    others = sorted((n for n in movable if n not in (target, dest) and grasped.get(n, 0) >= MIN_GRASP_STEPS),
                    key=lambda n: -grasped[n])
    last = states[-1]
    return LiberoTraceFacts(
        scenario=scenario,
        steps=len(states) - 1,
        success=bool(last.success),
        target=target,
        destination=dest,
        relation=str(goal[0][0]),
        texts=dict(zip(names, s0.texts)),
        grasped=grasped,
        lifted=frozenset(tally.lifted),
        closed_near=frozenset(tally.closed_near),
        touched=frozenset(tally.touched),
        tilted=frozenset(tally.tilted),
        moved=tally.moved,
        releases=tuple(releases),
        other_grasped=tuple(others),
        rests_in=_resting_place(P, last, target, dest),
        rested_in=_resting_place(P, s0, target, dest),
        end_dist=P.xy_distance(last, target, dest),
        stage_kinds=tuple(st.kind for st in pot.program.stages),
        max_stage=max_stage,
        phi=phis,
        min_dist=tally.min_dist,
        gripper_path=tally.path,
        program=pot.program,
    )


# ---- the critic --------------------------------------------------------------------------------------


def classify(f: LiberoTraceFacts) -> tuple[str, list[str], str]:
    """(failure mode, implicated entity names, explanation) of a failed episode's facts (the decision list
    of the module docstring)."""
    t, dest, W = f.target, f.destination, f.words
    held_t = f.grasped.get(t, 0) >= 1
    if f.rests_in is not None and f.rests_in not in (dest, f.rested_in):
        return "wrong_target", [t, f.rests_in], f"{W(t)} ended in/on {W(f.rests_in)} instead of {W(dest)}."
    if not held_t and f.other_grasped:
        o = f.other_grasped[0]
        return "wrong_object", [o, t], (
            f"The policy grasped {W(o)} for {f.grasped[o]} states and never grasped the target {W(t)}.")
    if (found := release_or_tip(f, t, dest, W, f.relation)) is not None:
        return found
    if held_t and f.target_lifted:
        if f.max_stage >= len(f.stage_kinds) - 1:
            return "imprecise_placement", [t, dest], f"{W(t)} was carried over {W(dest)} but never put down {f.relation} it."
        return ("detour" if f.gripper_path >= DETOUR_PATH else "no_progress"), [t, dest], (
            f"{W(t)} was lifted but not brought over {W(dest)} before the episode ended "
            f"(gripper path {f.gripper_path:.2f} m).")
    if t in f.closed_near and not held_t:
        return "missed_grasp", [t], (
            f"The jaws closed next to {W(t)} (closest {f.min_dist.get(t, math.nan):.3f} m) but never held it.")
    bumped = sorted(n for n in f.touched if n not in (t, dest))
    if bumped:
        return "collision", [*bumped, t], f"The fingers ran into {', '.join(W(n) for n in bumped)}."
    if f.gripper_path >= DETOUR_PATH:
        return "detour", [t], (
            f"The gripper travelled {f.gripper_path:.2f} m and came no closer than "
            f"{f.min_dist.get(t, math.nan):.2f} m to {W(t)}.")
    return "no_progress", [t], (
        f"The policy got no further than '{f.stage_reached}' in {f.steps} steps (gripper path "
        f"{f.gripper_path:.2f} m, closest {f.min_dist.get(t, math.nan):.2f} m to {W(t)}).")


def relevant_factors(mode: str, factors: Sequence[SceneFactor], involved: Sequence[str],
                     limit: int = 3) -> tuple[SceneFactor, ...]:
    """The factors whose kind can explain `mode` (RELEVANT), most likely first: by kind, then positions of
    the entities in `involved` order (target first), then the rest; at most `limit`."""
    kinds = RELEVANT.get(mode, RELEVANT["other"])
    rank = {n: i for i, n in enumerate(involved)}
    keep = [f for f in factors if f.kind in kinds]
    keep.sort(key=lambda f: (kinds.index(f.kind), rank.get(f.entity or "", len(rank))))
    return tuple(keep[:limit])


def stage_plan_words(f: LiberoTraceFacts) -> str:
    """The canonical stage program as a numbered plan in words."""
    assert f.program is not None
    counts: dict[str, int] = {}
    for t in f.texts.values():
        counts[t] = counts.get(t, 0) + 1

    def W(n: str) -> str:  # an entity's words, or its name where other entities share them
        t = f.texts.get(n, n)
        return f"the {t}" if counts.get(t, 0) == 1 else n
    lines = []
    for st in f.program.stages:
        o = st.args[0]
        if st.kind == "reach":
            lines.append(f"reach {W(o)}")
        elif st.kind == "grasp":
            lines.append(f"grasp {W(o)}")
        elif st.kind == "lift":
            lines.append(f"lift {W(o)} {100 * (st.value or 0.05):.0f} cm above the table")
        elif st.kind == "carry":
            lines.append(f"carry {W(o)} above {W(st.args[1])}")
        elif st.kind == "place":
            lines.append(f"place {W(o)} {f.relation} {W(st.args[1])}")
        else:
            lines.append(st.words())
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1))


class LiberoPrivilegedCritic:
    """Diagnoses failed LIBERO episodes from their `LiberoState` trace (see the module docstring).

    Args:
        name: the name written into diagnoses.
    """

    def __init__(self, name: str = "libero-privileged") -> None:
        self.name = name

    def _reject(self, episode: EpisodeRecord, reason: str) -> DiagnosisRejected:
        return DiagnosisRejected(critic=self.name, episode_id=episode.episode_id, reason=reason, raw_text="")

    def diagnose(self, episode: EpisodeRecord) -> CriticResult:
        """A Diagnosis of a failed episode; DiagnosisRejected (with the reason) for an episode without a state
        trace, of another backend, that succeeded, or whose goal is not one `in` / `on` predicate."""
        spec: Any = episode.spec
        if not isinstance(spec, LiberoScenario):
            return self._reject(episode, f"the episode's spec is a {type(spec).__name__}, not a LiberoScenario")
        if not episode.states:
            return self._reject(episode, f"the libero-privileged critic needs the state trace; episode "
                                         f"'{episode.episode_id}' has none")
        try:
            f = libero_trace_facts(episode.states, spec)
            factors = scenario_factors(spec)
        except LiberoError as e:
            return self._reject(episode, f"cannot read the episode: {e}")
        if f.success:
            return self._reject(episode, "the goal holds at the end of the episode: nothing to diagnose")
        mode, involved, explanation = classify(f)
        objects = tuple(dict.fromkeys(n for n in involved if n in f.texts))
        return Diagnosis(
            failure_mode=mode,
            stage_reached=f.stage_reached,
            objects=objects,
            factors=relevant_factors(mode, factors, [*objects, f.destination]),
            explanation=explanation,
            stage_plan=stage_plan_words(f),
            critic=self.name,
            episode_id=episode.episode_id,
        )


__all__ = [
    "libero_stage_program",
    "RELEVANT",
    "LiberoPrivilegedCritic",
    "LiberoRelease",
    "LiberoTraceFacts",
    "classify",
    "libero_entities",
    "libero_plan_potential",
    "libero_potential",
    "libero_trace_facts",
    "try_libero_plan",
    "relevant_factors",
    "stage_plan_words",
]
