"""The `privileged` critic: diagnoses a failed episode from the simulator's state trace and predicates.

It reads the facts of the trace (`coda.critic.trace`) and applies a fixed decision list, first match wins:

object goals (in / on / at_region)
    wrong_target          the target ends resting in/on/at an entity other than the destination
    wrong_object          another object was grasped (push: moved) while the target never was
    slip_during_transport the target left the closed jaws away from the destination
    imprecise_placement   released within 12 cm of the destination (or held over it) but not in/on it
    premature_release     released further away
    knocked_over          an object tipped over
    missed_grasp          the jaws closed next to the target without holding it
    collision             the fingers touched an entity that is not part of the goal
    detour                the gripper travelled more than 1.2 m without getting the task done
    no_progress           anything else
drawer goals: missed_grasp (jaws closed at the handle, drawer never held or moved), knocked_over,
    drawer_not_operated.

Implicated scene factors come first from the scene's provenance (the factors its generation program
varied), keeping those relevant to the failure mode; without provenance, from the mode itself (the
target's position for a missed grasp, the grasped object for a wrong object, ...). A `task` tag (the goal
was changed within the layout, by `change_task`) becomes a `task` factor on the goal's target, apart from
an `instruction` tag (the same goal, reworded). The stage plan is the scene's canonical plan; the stage
reached is the furthest canonical stage whose predicate held.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coda.critic.base import CriticUnavailable, EpisodeRecord
from coda.critic.diagnosis import CriticResult, Diagnosis, DiagnosisRejected, SceneFactor
from coda.critic.trace import MOVED, TraceFacts, trace_facts
from coda.scene.language import fraction_word, size_word
from coda.scene.regions import grid_region_of
from coda.scene.spec import ObjectSpec, ScenarioSpec, entity_kinds, entity_xy
from coda.shaping.resolve import entity_words
from coda.shaping.text2potential import canonical_plan

IMPRECISE_DIST = 0.12  # a release this close to the destination centre (m) is imprecise rather than premature
DETOUR_PATH = 1.2  # gripper path length (m) beyond which a failure without progress is a detour
MIN_GRASP_STEPS = 2  # states an object must be held to count as grasped on purpose

# Which factor kinds can explain each failure mode (provenance factors are filtered by this).
RELEVANT: dict[str, tuple[str, ...]] = {
    "missed_grasp": ("position", "object_attribute", "physics"),
    "slip_during_transport": ("physics", "object_attribute"),
    "wrong_object": ("instruction", "task", "distractor", "object_attribute"),
    "wrong_target": ("instruction", "task", "distractor", "position"),
    "knocked_over": ("distractor", "position", "physics"),
    "collision": ("distractor", "position"),
    "no_progress": ("instruction", "task", "position", "object_attribute", "distractor"),
    "detour": ("position", "instruction", "task", "distractor"),
    "premature_release": ("position", "physics"),
    "imprecise_placement": ("position", "object_attribute"),
    "drawer_not_operated": ("position", "physics", "instruction", "task"),
    "other": ("position", "region", "instruction", "task", "object_attribute", "distractor", "physics"),
}


def _nearest_other(spec: ScenarioSpec, near: str | None) -> str | None:
    """The non-goal object nearest to `near` (the likeliest distractor)."""
    goal = {a for g in spec.goal for a in g.args}
    others = [o for o in spec.objects if o.name not in goal]
    if not others:
        return None
    ref = np.array(entity_xy(spec, near)) if near else np.zeros(2)
    return min(others, key=lambda o: float(np.linalg.norm(np.array(o.pos) - ref))).name


def provenance_factor(spec: ScenarioSpec, tag: str) -> SceneFactor | None:
    """The SceneFactor for a provenance tag (`position:obj0`, `object:obj0:color`, `physics:mass`, ...)."""
    parts = tag.split(":")
    target = spec.goal[0].args[0]
    if parts[0] == "position" and len(parts) == 2 and parts[1] in _names(spec):
        x, y = entity_xy(spec, parts[1])
        return SceneFactor(kind="position", entity=parts[1], value=grid_region_of(x, y),
                           detail=f"{entity_words(spec.entity(parts[1]))} sits at x={x:+.2f} y={y:+.2f}")
    if parts[0] == "instruction":
        return SceneFactor(kind="instruction", entity=None, value=spec.instruction[:200], detail="the instruction's wording")
    if parts[0] == "task":
        return SceneFactor(kind="task", entity=target, value=goal_words(spec)[:200], detail="the task asked in this layout")
    if parts[0] == "object" and len(parts) == 3 and parts[1] in _names(spec):
        e = spec.entity(parts[1])
        attr = parts[2]
        if isinstance(e, ObjectSpec):
            val = {"color": e.color, "size": size_word(e), "shape": e.shape}.get(attr, attr)
        else:
            val = getattr(e, "color", attr) if attr == "color" else attr
        return SceneFactor(kind="object_attribute", entity=parts[1], value=f"{attr}={val}",
                           detail=f"the look of {entity_words(e)}")
    if parts[0] == "distractor":
        d = _nearest_other(spec, target)
        if d is None:
            return None
        return SceneFactor(kind="distractor", entity=d, value=entity_words(spec.entity(d)),
                           detail="an object that plays no part in the goal")
    if parts[0] == "physics" and len(parts) == 2:
        ph = spec.physics
        value = {"friction": f"friction_scale={ph.friction_scale:.2f}", "mass": f"mass_scale={ph.mass_scale:.2f}"}.get(
            parts[1], parts[1])
        return SceneFactor(kind="physics", entity=None, value=value, detail=f"scaled {parts[1]}")
    if parts[0] == "robot_start":
        return SceneFactor(kind="position", entity=None, value="robot_start", detail="the gripper's start pose")
    return None


def goal_words(spec: ScenarioSpec) -> str:
    """What the goal asks for in words: "red cube -> blue bowl", "brown drawer -> open"."""
    g = spec.goal[0]
    words = entity_words(spec.entity(g.args[0]))
    if len(g.args) > 1:
        return f"{words} -> {entity_words(spec.entity(g.args[1]))}"
    if g.value is not None:
        return f"{words} -> {fraction_word(g.value)}"
    return words


def _names(spec: ScenarioSpec) -> set[str]:
    return set(entity_kinds(spec))


def _heuristic_factors(mode: str, f: TraceFacts, involved: list[str]) -> list[SceneFactor]:
    spec = f.spec
    main = f.target or f.drawer or ""
    tags: list[str] = []
    if mode in ("wrong_object", "collision", "knocked_over") and len(involved) > 1:
        other = involved[0] if involved[0] != main else involved[-1]
        return [SceneFactor(kind="distractor", entity=other, value=entity_words(spec.entity(other)),
                            detail=f"the policy went for {entity_words(spec.entity(other))}")]
    if mode == "wrong_target" and len(involved) > 1:
        wrong = involved[1]
        return [SceneFactor(kind="distractor", entity=wrong, value=entity_words(spec.entity(wrong)),
                            detail="the policy used this as the destination")]
    if mode == "slip_during_transport":
        tags = ["physics:friction", f"object:{main}:size"]
    elif mode in ("premature_release", "imprecise_placement") and f.destination:
        tags = [f"position:{f.destination}"]
    elif mode == "missed_grasp":
        tags = [f"position:{main}"] + ([f"object:{main}:size"] if f.target else [])
    else:
        tags = [f"position:{main}"]
    return [x for x in (provenance_factor(spec, t) for t in tags) if x is not None]


def _factors(mode: str, f: TraceFacts, involved: list[str]) -> tuple[SceneFactor, ...]:
    tagged = [x for x in (provenance_factor(f.spec, t) for t in f.spec.provenance.factors) if x is not None]
    relevant = [x for x in tagged if x.kind in RELEVANT[mode]]
    chosen = relevant or _heuristic_factors(mode, f, involved)
    return tuple(chosen[:3])


def release_or_tip(f: Any, t: str, dest: str, W: Any, placed: str = "in/on") -> tuple[str, list[str], str] | None:
    """The mode the target's last release explains (slip, imprecise placement, premature release), else a
    tipped object (knocked over), else None. `f` has `releases`, `tilted` and `end_dist` (the tabletop's and
    LIBERO's trace facts both do); `W` names an entity in words; `placed` is the goal relation in words."""
    if f.releases:
        r = f.releases[-1]
        if not r.commanded and not r.over_destination:
            return "slip_during_transport", [t], (
                f"{W(t)} slipped out of the closed jaws at step {r.step}, {r.height:.2f} m up and {r.dist:.2f} m "
                f"from {W(dest)}.")
        if r.over_destination or r.dist <= IMPRECISE_DIST:
            return "imprecise_placement", [t, dest], (
                f"{W(t)} was released at step {r.step} {r.dist:.2f} m from {W(dest)} and ended "
                f"{f.end_dist:.2f} m from its centre, not {placed} it.")
        return "premature_release", [t, dest], (
            f"The jaws opened at step {r.step} with {W(t)} {r.dist:.2f} m away from {W(dest)}.")
    if f.tilted:
        tipped = sorted(f.tilted)
        return "knocked_over", tipped, f"The policy knocked over {', '.join(W(n) for n in tipped)}."
    return None


def classify(f: TraceFacts) -> tuple[str, list[str], str]:
    """(failure mode, implicated entity names, explanation) for a failed episode's facts."""
    if f.drawer is not None:
        return _classify_drawer(f)
    t, dest = f.target, f.destination
    assert t is not None and dest is not None
    W = f.words
    held_t = f.grasped.get(t, 0) >= 1
    others = sorted((n for n, c in f.grasped.items() if n != t and n != dest and c >= MIN_GRASP_STEPS
                     and n in {o.name for o in f.spec.objects}), key=lambda n: -f.grasped[n])
    if f.rests_in is not None and f.rests_in != dest:
        return "wrong_target", [t, f.rests_in], f"{W(t)} ended in/on {W(f.rests_in)} instead of {W(dest)}."
    if not held_t and others:
        return "wrong_object", [others[0], t], (
            f"The policy grasped {W(others[0])} for {f.grasped[others[0]]} steps and never grasped the target {W(t)}.")
    pushed = [n for n, d in f.moved.items() if n not in (t, dest) and d >= MOVED and n in f.touched]
    if f.spec.goal[0].name == "at_region" and f.moved.get(t, 0.0) < MOVED and pushed:
        return "wrong_object", [pushed[0], t], f"The policy pushed {W(pushed[0])} while the target {W(t)} stayed put."
    if (found := release_or_tip(f, t, dest, W)) is not None:
        return found
    if held_t and t in f.lifted:
        if f.max_stage >= len(f.stage_kinds) - 1:
            return "imprecise_placement", [t, dest], f"{W(t)} was carried over {W(dest)} but never put down in/on it."
        return ("detour" if f.gripper_path >= DETOUR_PATH else "no_progress"), [t, dest], (
            f"{W(t)} was lifted but not brought over {W(dest)} before the episode ended "
            f"(gripper path {f.gripper_path:.2f} m).")
    if t in f.closed_near and not held_t:
        return "missed_grasp", [t], (
            f"The jaws closed next to {W(t)} (closest {f.min_dist.get(t, float('nan')):.3f} m) but never held it.")
    if f.spec.goal[0].name == "at_region" and f.moved.get(t, 0.0) >= MOVED:
        if f.end_dist is not None and f.end_dist <= IMPRECISE_DIST:
            return "imprecise_placement", [t, dest], f"{W(t)} was pushed to {f.end_dist:.2f} m from {W(dest)} but not into it."
    bumped = sorted(n for n in f.touched if n not in (t, dest))
    if bumped:
        return "collision", [*bumped, t], f"The fingers ran into {', '.join(W(n) for n in bumped)}."
    if f.gripper_path >= DETOUR_PATH:
        return "detour", [t], (
            f"The gripper travelled {f.gripper_path:.2f} m and came no closer than "
            f"{f.min_dist.get(t, float('nan')):.2f} m to {W(t)}.")
    return "no_progress", [t], (
        f"The policy got no further than '{f.stage_reached}' (gripper path {f.gripper_path:.2f} m, closest "
        f"{f.min_dist.get(t, float('nan')):.2f} m to {W(t)}).")


def _classify_drawer(f: TraceFacts) -> tuple[str, list[str], str]:
    d = f.drawer
    assert d is not None and f.drawer_fractions is not None
    a, b, lo, hi = f.drawer_fractions
    g = f.spec.goal[0]
    if f.grasped.get(d, 0) == 0 and d in f.closed_near and hi - lo < 0.05:
        return "missed_grasp", [d], f"The jaws closed at the handle of {f.words(d)} without holding it."
    if f.tilted:
        tipped = sorted(f.tilted)
        return "knocked_over", tipped, f"The policy knocked over {', '.join(f.words(n) for n in tipped)}."
    return "drawer_not_operated", [d], (
        f"{f.words(d)} went from {a:.2f} to {b:.2f} open (range {lo:.2f}..{hi:.2f}); the goal is "
        f"{g.value:.2f} +- {g.tol:.2f}.")


class PrivilegedCritic:
    """Diagnoses failed episodes from their privileged state trace (see the module docstring).

    Args:
        predicates: predicate module (default: the tabletop simulator's).
        name: the name written into diagnoses.
    """

    def __init__(self, predicates: Any = None, name: str = "privileged") -> None:
        self.predicates = predicates
        self.name = name

    def facts(self, episode: EpisodeRecord) -> TraceFacts:
        """The trace facts of an episode. Raises CriticUnavailable without a state trace."""
        if not episode.states:
            raise CriticUnavailable(
                f"privileged critic needs the state trace; episode '{episode.episode_id}' has none"
            )
        return trace_facts(episode.states, episode.spec, self.predicates)

    def diagnose(self, episode: EpisodeRecord) -> CriticResult:
        """A Diagnosis of a failed episode; a succeeded one comes back as DiagnosisRejected (nothing failed)."""
        f = self.facts(episode)
        if f.success:
            return DiagnosisRejected(critic=self.name, episode_id=episode.episode_id,
                                     reason="the goal holds at the end of the episode: nothing to diagnose", raw_text="")
        mode, involved, explanation = classify(f)
        names = _names(episode.spec)
        objects = tuple(dict.fromkeys(n for n in involved if n in names))
        return Diagnosis(
            failure_mode=mode,
            stage_reached=f.stage_reached,
            objects=objects,
            factors=_factors(mode, f, list(objects)),
            explanation=explanation,
            stage_plan=canonical_plan(episode.spec),
            critic=self.name,
            episode_id=episode.episode_id,
        )
