"""Text2potential: a stage plan in words → a stage program → a staged potential Φ(s).

    plan = canonical_plan(spec)   # "1. reach the small red cube 2. grasp it 3. lift it 4. move above ..."
    pot = compile_plan(plan, spec)
    pot.phi(state)                # (k + p_k) / K, a function of the state alone

**Parsing.** A plan is split into steps (numbers "1." / "2)", new lines, ";", or "and"/"then" before a
verb). Each step starts with a verb that picks the stage kind — reach/approach/go to, grasp/grab/pick up,
lift/raise, move/carry/bring above/over, place/put/drop/release/lower/set/stack in/into/on/onto,
push/slide/shove/nudge into, open/pull/draw/extend (halfway, fully, to 40%), close/shut/retract — and the
rest names the object and the target, resolved against the scene by `coda.shaping.resolve` ("it" is the
object last mentioned). Anything that cannot be mapped raises `PlanParseError` naming the words;
`try_parse_plan` returns a `PlanRejected` record instead. Nothing in a plan is ever executed.

**Potential.** `Φ(s) = (k(s) + p(s)) / K`: K stages, k(s) the furthest stage whose predicate holds in s
(stage predicates are cumulative, see `coda.shaping.stages`), p(s) ∈ [0, 1] the progress of stage k + 1
(0 when k = K), capped at 0.99 so that Φ = 1 exactly when the last stage holds and finishing a stage
always raises Φ. Φ reads the current state only, as potential-based shaping requires; for terminal
states use Φ = 0 (`coda.shaping.math`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from coda.scene.spec import GoalPredicate, ScenarioSpec, entity_kinds, format_validation_error
from coda.shaping.program import ProgramError, Stage, StageProgram, program_json_schema
from coda.shaping.resolve import NamedEntities, PlanParseError, all_entities, entity_words, resolve
from coda.shaping.stages import STAGES, make_context

__all__ = [
    "NamedEntities",
    "PlanParseError",
    "PlanRejected",
    "StagedPotential",
    "canonical_plan",
    "compile_plan",
    "parse_plan",
    "translate_plan",
    "try_parse_plan",
]

# Verb (first word of a step) → verb class.
_VERBS: dict[str, str] = {
    **dict.fromkeys(("reach", "approach"), "reach"),
    **dict.fromkeys(("go", "head", "navigate"), "go"),
    **dict.fromkeys(("grasp", "grab", "grip", "seize", "hold", "pick", "catch"), "grasp"),
    **dict.fromkeys(("lift", "raise", "elevate", "hoist"), "lift"),
    **dict.fromkeys(("move", "carry", "bring", "transport", "take", "hover", "transfer", "position"), "move"),
    **dict.fromkeys(("place", "put", "drop", "release", "lower", "set", "deposit", "stack", "insert", "rest", "let",
                     "pile"), "place"),
    **dict.fromkeys(("push", "slide", "shove", "nudge"), "push"),
    **dict.fromkeys(("open", "pull", "draw", "extend"), "open"),
    **dict.fromkeys(("close", "shut", "retract", "tuck"), "close"),
}
_VERB_ALT = "|".join(sorted(_VERBS, key=len, reverse=True))
_NUMBER = re.compile(r"(?:^|\s)(?:step\s*)?\d{1,2}\s*[.):]\s+", re.I)
_CONJ = r"(?:and then|and|then|after that|afterwards|finally|next)"
_JOIN = re.compile(rf"\s*(?:[,.]\s*(?:{_CONJ}\s+)?|\s{_CONJ}\s+)(?=(?:{_VERB_ALT})\b)")
_LEAD = re.compile(r"^(?:(?:first|then|next|finally|now|and|after that|afterwards|carefully|slowly|gently|"
                   r"the robot should|robot)(?:\s*,?\s+|\s*,?\s*$))+")
_PREP = re.compile(r"\b(on top of|inside of|inside|into|onto|atop|upon|above|over|within|towards|toward|to|in|on|near|at)\b")
_FILLER = re.compile(
    r"\b(?:up|down|off the table|off|from the table|by pushing it|with the gripper|the gripper|gripper|its fingers|"
    r"fingers|hand|go of|go|until it (?:sits|is|lies|rests)|so (?:that )?it (?:sits|is|lies|rests)|carefully|gently|"
    r"slowly|again|back|out|open|closed|shut|of the way|way|all|for|from above|from behind|from the side)\b"
)
_INTO = ("into", "inside", "inside of", "in", "within", "onto", "on", "on top of", "atop", "upon")
_OVER = ("above", "over", "to", "towards", "toward", "near", "at")
_FRACTION_WORDS = (
    (r"\b(?:half\s*way|halfway|half open|half|part\s*way|partially|partly|midpoint)\b", 0.5),
    (r"\b(?:fully|all the way|completely|entirely|wide|full)\b", 1.0),
)
_PERCENT = re.compile(r"(?:to\s+)?(\d{1,3}(?:\.\d+)?)\s*(?:%|percent)")
_DECIMAL = re.compile(r"\bto\s+(0?\.\d+|1(?:\.0+)?)\b")
_LENGTH = re.compile(r"(?:by\s+)?(\d+(?:\.\d+)?)\s*(cm|centimet(?:er|re)s?|mm|millimet(?:er|re)s?|m|met(?:er|re)s?)\b")
_PRONOUN = re.compile(r"^(?:it|them|itself)$")

Scene = ScenarioSpec | NamedEntities  # what a plan's phrases are resolved against


class PlanRejected(BaseModel):
    """A plan that could not be compiled: the text, the reason, and the phrase at fault."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: str = "plan_rejected"
    text: str
    reason: str
    phrase: str = ""


def split_steps(text: str) -> list[str]:
    """Split a plan into step strings (numbered, one per line or ';', or joined by 'and'/'then' + verb)."""
    body = re.sub(r"^\s*(?:stage plan|plan|steps)\s*:\s*", "", text.strip().lower())
    if _NUMBER.search(body):
        parts = _NUMBER.split(" ".join(body.split()))
    else:
        parts = re.split(r"\n+|;", body)
    steps: list[str] = []
    for p in parts:
        for q in _JOIN.split(p):
            q = _LEAD.sub("", q.strip(" \t\n.,;:!-*•")).strip(" .,;:!")
            if q:
                steps.append(q)
    return steps


class _Context:
    """What earlier steps established: the object last mentioned and the last target."""

    def __init__(self) -> None:
        self.obj: str | None = None
        self.drawer: str | None = None
        self.target: str | None = None


def _clean(phrase: str) -> str:
    """A phrase without filler words ("up", "down", "the gripper", "until it sits" ...)."""
    return re.sub(r"\s+", " ", _FILLER.sub(" ", phrase)).strip(" ,.")


def _entity(phrase: str, spec: Scene, kinds: tuple[str, ...], ctx: _Context, step: str) -> str:
    p = _clean(phrase)
    if _PRONOUN.match(p) or p == "":
        ref = ctx.drawer if kinds == ("drawer",) else ctx.obj
        if ref is None:
            raise PlanParseError(
                f"cannot map phrase '{phrase.strip() or step}' in step '{step}': nothing mentioned before it to refer to",
                phrase.strip() or step,
            )
        return ref
    return resolve(p, spec, kinds)


def _split_target(rest: str) -> tuple[str, str | None, str]:
    """(object words, preposition, target words) — at the first preposition."""
    m = _PREP.search(rest)
    if not m:
        return rest, None, ""
    return rest[: m.start()], m.group(1), rest[m.end() :]


def _fraction(rest: str) -> tuple[float | None, str]:
    m = _PERCENT.search(rest)
    if m:
        v = float(m.group(1)) / 100.0
        return v, rest[: m.start()] + rest[m.end() :]
    m = _DECIMAL.search(rest)
    if m:
        return float(m.group(1)), rest[: m.start()] + rest[m.end() :]
    for pattern, v in _FRACTION_WORDS:
        m2 = re.search(pattern, rest)
        if m2:
            return v, rest[: m2.start()] + rest[m2.end() :]
    return None, rest


def _length(rest: str) -> tuple[float | None, str]:
    m = _LENGTH.search(rest)
    if not m:
        return None, rest
    unit = m.group(2)
    scale = 0.01 if unit.startswith("c") else (0.001 if unit.startswith(("mm", "milli")) else 1.0)
    return float(m.group(1)) * scale, rest[: m.start()] + rest[m.end() :]


def _goal_fraction(spec: Scene, drawer: str) -> float:
    if isinstance(spec, NamedEntities):
        return 1.0
    for g in spec.goal:
        if g.name == "drawer_fraction" and g.args[0] == drawer and g.value is not None and g.value > 0:
            return float(g.value)
    return 1.0


def _mentions_gripper(rest: str) -> bool:
    return bool(re.search(r"\b(?:gripper|fingers|hand|claw)\b", rest))


def _stage_class(step: str) -> tuple[str, str]:
    """(stage class, rest of the step) of one step in words: the verb's class (`_VERBS`), read in
    context ("close the gripper on" grasps, "open the gripper" releases, "push the drawer" closes it).
    Raises PlanParseError for an unknown verb or a drawer to move."""
    m = re.match(r"([a-z]+)\b\s*(.*)$", step)
    if not m or m.group(1) not in _VERBS:
        first = m.group(1) if m else step
        raise PlanParseError(f"cannot map step '{step}': '{first}' is not a known stage verb", step)
    verb, rest = m.group(1), m.group(2)
    cls = _VERBS[verb]
    if cls == "close" and verb == "close" and _mentions_gripper(rest):
        cls = "grasp"  # "close the gripper on the red cube"
    if cls == "open" and verb == "open" and _mentions_gripper(rest):
        cls = "release"  # "open the gripper" lets go of the held object
    if verb == "let":
        cls = "release"
    if cls == "push" and re.search(r"\bdrawer\b", rest):
        cls = "close"  # "push the drawer closed"
    if cls == "move" and re.search(r"\bdrawer\b", rest):
        raise PlanParseError(f"cannot map step '{step}': say open or close for a drawer", step)
    return cls, rest


def _scene_kinds(spec: Scene) -> dict[str, str]:
    return dict(spec.kinds) if isinstance(spec, NamedEntities) else entity_kinds(spec)


def _check(program: StageProgram, spec: Scene) -> StageProgram:
    return program.check_kinds(dict(spec.kinds)) if isinstance(spec, NamedEntities) else program.check_scene(spec)


def parse_step(step: str, spec: Scene, ctx: _Context) -> Stage:
    """One step in words → one Stage. Raises PlanParseError naming the words it could not map."""
    cls, rest = _stage_class(step)
    kinds = _scene_kinds(spec)
    obj_kinds = ("object",)
    target_kinds = ("container", "object", "region")

    if cls in ("reach", "go"):
        obj_part, prep, target = _split_target(rest)
        words = target if _clean(obj_part) == "" and prep is not None else rest
        e = _entity(words, spec, ("object", "drawer", "container"), ctx, step)
        if kinds[e] == "drawer":
            ctx.drawer = e
        elif kinds[e] == "object":
            ctx.obj = e
        return Stage(kind="reach", args=(e,))
    if cls == "grasp":
        o = _entity(_split_target(rest)[0] if not _mentions_gripper(rest) else _after_prep(rest), spec, obj_kinds, ctx, step)
        ctx.obj = o
        return Stage(kind="grasp", args=(o,))
    if cls == "lift":
        h, rest2 = _length(rest)
        o = _entity(_split_target(rest2)[0], spec, obj_kinds, ctx, step)
        ctx.obj = o
        return Stage(kind="lift", args=(o,), value=h)
    if cls == "move":
        obj_part, prep, target = _split_target(rest)
        if prep is None:
            raise PlanParseError(f"cannot map step '{step}': no destination (above/over/into/on ...)", step)
        if _mentions_gripper(obj_part) or (_clean(obj_part) == "" and ctx.obj is None):
            e = _entity(target, spec, ("object", "drawer", "container"), ctx, step)  # "move to the red cube"
            if kinds[e] == "object":
                ctx.obj = e
            return Stage(kind="reach", args=(e,))
        o = _entity(obj_part, spec, obj_kinds, ctx, step)
        t = _entity(target, spec, target_kinds, ctx, step)
        ctx.obj, ctx.target = o, t
        return Stage(kind="place" if prep in _INTO else "carry", args=(o, t))
    if cls in ("place", "release"):
        obj_part, prep, target = _split_target(rest)
        if cls == "release":
            obj_part = ""
        o = _entity(obj_part, spec, obj_kinds, ctx, step)
        if prep is not None and target.strip():
            t = _entity(target, spec, target_kinds, ctx, step)
        elif ctx.target is not None:
            t = ctx.target  # "release it" after "move above the bowl"
        else:
            raise PlanParseError(f"cannot map step '{step}': it does not say where to place the object", step)
        ctx.obj, ctx.target = o, t
        return Stage(kind="place", args=(o, t))
    if cls == "push":
        obj_part, prep, target = _split_target(rest)
        o = _entity(obj_part, spec, obj_kinds, ctx, step)
        if prep is None or not target.strip():
            raise PlanParseError(f"cannot map step '{step}': it does not say where to push the object", step)
        t = _entity(target, spec, ("region", "container"), ctx, step)
        ctx.obj, ctx.target = o, t
        return Stage(kind="push", args=(o, t))
    if cls == "open":
        v, rest2 = _fraction(rest)
        d = _entity(rest2, spec, ("drawer",), ctx, step)
        ctx.drawer = d
        return Stage(kind="open", args=(d,), value=v if v is not None else _goal_fraction(spec, d))
    # close
    d = _entity(rest, spec, ("drawer",), ctx, step)
    ctx.drawer = d
    return Stage(kind="close", args=(d,))


def _after_prep(rest: str) -> str:
    m = re.search(r"\b(?:on|around|onto|over)\b(.*)$", rest)
    return m.group(1) if m else ""


def parse_plan(text: str, spec: Scene) -> StageProgram:
    """Parse a stage plan in words into a StageProgram over `spec`'s entities (a tabletop scene, or another
    backend's scene as `NamedEntities`).

    Raises:
        PlanParseError: a step whose verb is unknown or a phrase that maps to no (or several) entities;
            the message names the words.
    """
    steps = split_steps(text)
    if not steps:
        raise PlanParseError("cannot map an empty plan", text)
    ctx = _Context()
    stages: list[Stage] = []
    for step in steps:
        try:
            stages.append(parse_step(step, spec, ctx))
        except ValidationError as e:  # e.g. "lift it 80 cm": an amount outside its range
            raise PlanParseError(f"cannot map step '{step}': {format_validation_error('stage', e)}", step) from None
    return _check(StageProgram(stages=tuple(stages), source=text), spec)


def try_parse_plan(text: str, spec: Scene) -> StageProgram | PlanRejected:
    """Like `parse_plan`, but a plan that cannot be mapped comes back as a PlanRejected record."""
    try:
        return parse_plan(text, spec)
    except PlanParseError as e:
        return PlanRejected(text=text, reason=str(e), phrase=e.phrase)
    except ProgramError as e:
        return PlanRejected(text=text, reason=str(e))


# ---- canonical plans ---------------------------------------------------------------------------------


def _words(spec: ScenarioSpec, name: str) -> str:
    """Canonical words for an entity, or its name when the words would not pick it out."""
    w = entity_words(spec.entity(name))
    try:
        return w if resolve(w, spec) == name else name
    except PlanParseError:
        return name


def _fraction_words(v: float) -> str:
    if abs(v - 1.0) < 1e-9:
        return "fully"
    if abs(v - 0.5) < 1e-9:
        return "halfway"
    return f"to {round(100 * v)}%"


def _goal_steps(spec: ScenarioSpec, g: GoalPredicate) -> list[str]:
    if g.name in ("in", "on"):
        o, t = (_words(spec, a) for a in g.args)
        last = f"release it inside the {t}" if g.name == "in" else f"place it on the {t}"
        return [f"reach the {o}", "grasp it", "lift it", f"move above the {t}", last]
    if g.name == "at_region":
        o, r = (_words(spec, a) for a in g.args)
        return [f"reach the {o}", f"push it into the {r}"]
    d = _words(spec, g.args[0])
    assert g.value is not None and g.tol is not None  # enforced by GoalPredicate
    if g.value <= g.tol:
        return [f"reach the {d} handle", f"close the {d}"]
    return [f"reach the {d} handle", f"open the {d} {_fraction_words(g.value)}"]


def canonical_plan(spec: ScenarioSpec) -> str:
    """The canonical stage plan in words for a scene's goal, one numbered step per stage.

    pick_place: reach, grasp, lift, move above the container, release inside it; stack: the same ending
    "place it on" the bottom object; push: reach, push into the region; drawer: reach the handle, open
    (fully / halfway / to N%) or close. Goals with several conjuncts get their steps one after another.
    """
    steps = [s for g in spec.goal for s in _goal_steps(spec, g)]
    return " ".join(f"{i + 1}. {s}" for i, s in enumerate(steps))


# ---- the potential -----------------------------------------------------------------------------------


#: Progress counts at most this much of a stage, so Φ = 1 only when the last stage's predicate holds.
PROGRESS_CAP = 0.99


class StagedPotential:
    """Φ(s) = (k(s) + p(s)) / K over a stage program (see the module docstring).

    Args:
        program: the stages; checked against the scene.
        spec: the scene the states come from (None for another backend's scene: give `kinds`).
        predicates: the predicate functions (default: the tabletop simulator's).
        kinds: entity name -> object, container, drawer or region, when there is no ScenarioSpec.

    Raises:
        ProgramError: the program names entities the scene lacks or of the wrong kind.
    """

    def __init__(self, program: StageProgram, spec: ScenarioSpec | None, predicates: Any = None,
                 kinds: dict[str, str] | None = None) -> None:
        self.program = program.check_scene(spec) if spec is not None else program.check_kinds(kinds or {})
        self.spec = spec
        self.ctx = make_context(spec, predicates, kinds)
        self._kinds = [STAGES.get(st.kind) for st in program.stages]

    @property
    def K(self) -> int:
        """Number of stages."""
        return len(self.program.stages)

    def stages_done(self, state: Any) -> int:
        """k(s): the 1-based index of the furthest stage whose predicate holds (0 if none)."""
        for j in range(self.K - 1, -1, -1):
            if self._kinds[j].holds(state, self.program.stages[j], self.ctx):
                return j + 1
        return 0

    def progress(self, state: Any, k: int | None = None) -> float:
        """p(s): progress in [0, 1] of the stage after the k done (0 when all are done)."""
        k = self.stages_done(state) if k is None else k
        if k >= self.K:
            return 0.0
        return self._kinds[k].progress(state, self.program.stages[k], self.ctx)

    def phi(self, state: Any) -> float:
        """Φ(s) ∈ [0, 1]; 1 exactly when the last stage holds."""
        k = self.stages_done(state)
        # Capped below 1: full progress towards a stage is still worth less than having done it.
        return (k + min(self.progress(state, k), PROGRESS_CAP)) / self.K

    __call__ = phi

    def phis(self, states: Iterable[Any]) -> np.ndarray:
        """Φ along a sequence of states."""
        return np.asarray([self.phi(s) for s in states], dtype=np.float64)

    def explain(self, state: Any) -> str:
        """Which stage a state is in, in words: `3/5 done (lift(obj0)), next carry(obj0, container0) 40%`."""
        k = self.stages_done(state)
        done = self.program.stages[k - 1].words() if k else "none"
        if k >= self.K:
            return f"{k}/{self.K} done ({done})"
        return f"{k}/{self.K} done ({done}), next {self.program.stages[k].words()} {100 * self.progress(state, k):.0f}%"


def compile_plan(text: str, spec: ScenarioSpec, predicates: Any = None) -> StagedPotential:
    """Parse a plan in words and build its potential. Raises PlanParseError (see `parse_plan`)."""
    return StagedPotential(parse_plan(text, spec), spec, predicates)


# ---- optional: a language model translates free text into the same stage schema --------------------


class ChatJSON(Protocol):
    """What `translate_plan` needs from an endpoint (`coda.critic.vlm.ChatEndpoint` fits)."""

    def complete(
        self, messages: list[dict[str, Any]], schema: dict[str, Any], schema_name: str
    ) -> tuple[str | None, list[str]]: ...


_TRANSLATE_PROMPT = """Translate a robot task plan into a stage program (JSON). Stage kinds and args:
reach(entity) grasp(object) lift(object; value = height in m or null) carry(object, target)
place(object, target) push(object, region) open(drawer; value = opening fraction 0..1) close(drawer).
Use the entity names listed below as args. Answer with one JSON object: {"stages": [{"kind", "args", "value"}]}."""


def translate_plan(text: str, spec: ScenarioSpec, endpoint: ChatJSON) -> StageProgram | PlanRejected:
    """Have a language model translate free text into a StageProgram; its JSON is validated, never run.

    The answer must be one JSON object (optionally in a single code fence) that fits the program schema
    and names entities of `spec` with the right kinds; otherwise a PlanRejected record says why.
    Endpoint errors (e.g. `CriticUnavailable`) propagate.
    """
    scene = "\n".join(f"- {e.name}: {entity_words(e)}" for e in all_entities(spec))
    messages = [
        {"role": "system", "content": _TRANSLATE_PROMPT},
        {"role": "user", "content": f"Scene entities:\n{scene}\n\nPlan:\n{text}"},
    ]
    answer, _notes = endpoint.complete(messages, program_json_schema(), "stage_program")
    body = (answer or "").strip()
    fence = re.match(r"^```[a-zA-Z]*\s*\n(.*)\n\s*```$", body, re.DOTALL)
    if fence:
        body = fence.group(1).strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return PlanRejected(text=text, reason=f"model answer is malformed JSON: {e.msg} at column {e.colno}", phrase=body[:200])
    try:
        prog = StageProgram.from_data(data, spec)
    except ProgramError as e:
        return PlanRejected(text=text, reason=f"model answer is off-schema: {e}", phrase=body[:200])
    return prog.model_copy(update={"source": text})


def spearman_with_time(values: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation of a sequence with its time index (1.0 = never decreases; nan if constant)."""
    from scipy.stats import spearmanr

    v = np.asarray(values, dtype=np.float64)
    if v.size < 2 or np.all(v == v[0]):
        return float("nan")
    return float(spearmanr(np.arange(v.size), v).statistic)
