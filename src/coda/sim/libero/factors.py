"""Scene factors of a LIBERO scenario: what its BDDL changes relative to its task's official BDDL.

`scenario_factors` lists them: an object's initial region (reassigned, moved or widened: `position`), the
goal (`task`), or the instruction alone (`instruction`). `undo_factor` puts one factor back as the official
task has it, `transplant_factor` copies it into another scenario of the same task; `factor_edits` gives
them to the verifier's single-factor counterfactuals (`coda.critic.verdict.VerifierFlow`) as the backend's
`FactorEdit`s. Edits are made on the BDDL text itself, so everything a factor does not touch stays byte
for byte.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.scene.factors import CompileError, FactorError, SceneFactor
from coda.sim.libero import suites as S
from coda.sim.libero.bddl_edit import region_ranges
from coda.sim.libero.errors import LiberoError
from coda.sim.libero.operators import init_regions
from coda.sim.libero.scenario import LiberoScenario
from coda.sim.libero.state import category_words
from coda.sim.libero.suites import bddl_region_pairs, bddl_regions

if TYPE_CHECKING:
    from coda.sim.backends import FactorEdit

MAX_FACTORS = 3  # implicated factors a verifier tests per diagnosis: each test costs LIBERO episodes


class LiberoDiagnosisError(LiberoError, FactorError):
    """A scene factor cannot be undone or transplanted; the message names the factor and why."""


# ---- BDDL text helpers ---------------------------------------------------------------------------------

_NUM = r"-?\d+(?:\.\d*)?(?:[eE]-?\d+)?"


def _region_names(text: str) -> dict[str, str]:
    """Init reference (`floor_target_object_region`) -> region name (`target_object_region`)."""
    return {f"{target}_{name}": name for name, target in bddl_region_pairs(text)}


def _rect_span(text: str, region: str) -> tuple[int, int] | None:
    """Span of the four numbers of the region's first `(:ranges ...)` rectangle; None without ranges."""
    pattern = re.compile(r"\(\s*" + re.escape(region) + r"\s*\(\s*:target\s+[^\s()]+\s*\)\s*\(\s*:ranges\s*\(\s*\(\s*"
                         rf"({_NUM}\s+{_NUM}\s+{_NUM}\s+{_NUM})\s*\)", flags=re.IGNORECASE)
    m = pattern.search(text)
    return (m.start(1), m.end(1)) if m else None


def _rect(text: str, region: str | None) -> tuple[float, float, float, float] | None:
    if region is None or _rect_span(text, region) is None:
        return None
    return region_ranges(text, region)


def _copy_rect(dst: str, src: str, region: str) -> str:
    """`dst` with the region's rectangle text copied byte for byte from `src` (unchanged if either lacks it)."""
    a, b = _rect_span(dst, region), _rect_span(src, region)
    if a is None or b is None:
        return dst
    return dst[: a[0]] + src[b[0] : b[1]] + dst[a[1] :]


def _section_span(text: str, key: str) -> tuple[int, int] | None:
    """Span of the top-level `(<key> ...)` form (parentheses matched), or None."""
    m = re.search(r"\(\s*" + re.escape(key) + r"(?=[\s()])", text, flags=re.IGNORECASE)
    if m is None:
        return None
    depth = 0
    for i in range(m.start(), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return m.start(), i + 1
    return None


def _copy_section(dst: str, src: str, key: str, factor: SceneFactor) -> str:
    a, b = _section_span(dst, key), _section_span(src, key)
    if b is None:
        return dst
    if a is None:
        raise LiberoDiagnosisError(f"factor {_name(factor)}: the BDDL text has no ({key} ...) section to replace")
    return dst[: a[0]] + src[b[0] : b[1]] + dst[a[1] :]


def _set_init(text: str, obj: str, ref: str) -> str:
    """`text` with `(On obj ...)` of the `(:init ...)` section placing `obj` in `ref`."""
    span = _section_span(text, ":init")
    if span is None:
        raise LiberoDiagnosisError(f"the BDDL text has no (:init ...) section to place {obj!r} in")
    body, n = re.subn(rf"\(\s*On\s+{re.escape(obj)}\s+[A-Za-z0-9_]+\s*\)", f"(On {obj} {ref})",
                      text[span[0] : span[1]], count=1, flags=re.IGNORECASE)
    if n != 1:
        raise LiberoDiagnosisError(f"(:init ...) has no (On {obj} region) clause")
    return text[: span[0]] + body + text[span[1] :]


def _name(f: SceneFactor) -> str:
    return f"{f.kind}:{f.entity}={f.value!r}"


def _official(scenario: LiberoScenario) -> str:
    return S.get_task(scenario.suite, scenario.task_id).bddl_text()


def _rebuilt(scenario: LiberoScenario, text: str, official: str, seed: int) -> LiberoScenario:
    return replace(scenario, bddl=None if text == official else text, init_state=None, seed=int(seed))


# ---- scene factors -----------------------------------------------------------------------------------


def swap_partner(text: str, official: str, obj: str) -> str | None:
    """The object that now starts in `obj`'s official region while its own official region is another."""
    now, then = init_regions(text), init_regions(official)
    if obj not in then or now.get(obj) == then[obj]:
        return None
    return next((p for p, r in now.items() if p != obj and r == then[obj] and then.get(p) != r), None)


def _position_factor(obj: str, text: str, official: str, words: dict[str, str]) -> SceneFactor | None:
    now, then = init_regions(text), init_regions(official)
    ref, ref0 = now[obj], then.get(obj)
    names, names0 = _region_names(text), _region_names(official)
    rect, rect0 = _rect(text, names.get(ref)), _rect(official, names0.get(ref0) if ref0 else None)
    value = f"{(rect[0] + rect[2]) / 2:.3f},{(rect[1] + rect[3]) / 2:.3f}" if rect else ref
    w = words.get(obj, obj)
    if ref != ref0:
        owner = next((p for p, r in then.items() if r == ref and p != obj), None)
        detail = (f"the {w} is swapped with the {words.get(owner, owner)}: it starts in that object's region {ref}"
                  if owner else f"the {w} starts in region {ref} instead of {ref0}")
        return SceneFactor(kind="position", entity=obj, value=value, detail=detail)
    if rect is None or rect0 is None or np.allclose(rect, rect0, atol=1e-6):
        return None
    dx, dy = (rect[0] + rect[2] - rect0[0] - rect0[2]) / 2, (rect[1] + rect[3] - rect0[1] - rect0[3]) / 2
    grow = ((rect[2] - rect[0]) - (rect0[2] - rect0[0]) + (rect[3] - rect[1]) - (rect0[3] - rect0[1])) / 4
    parts = []
    if math.hypot(dx, dy) > 1e-6:
        parts.append(f"moved by ({dx:+.3f}, {dy:+.3f}) m")
    if abs(grow) > 1e-6:
        parts.append(f"{'widened' if grow > 0 else 'narrowed'} by {abs(grow):.3f} m on each side")
    return SceneFactor(kind="position", entity=obj, value=value,
                       detail=f"the {w}'s initial region {names.get(ref, ref)} is {' and '.join(parts)}")


def scenario_factors(scenario: LiberoScenario) -> list[SceneFactor]:
    """What the scenario's BDDL changes relative to its task's official BDDL (see the module docstring):
    `task` (another goal), `instruction` (the same goal, other words), then `position` per object whose
    initial region is reassigned or has other ranges. The official BDDL has none.

    Raises:
        LiberoError: unknown suite or task, or malformed BDDL text.
    """
    if scenario.bddl is None:
        return []
    text, official = scenario.bddl_text(), _official(scenario)
    if text == official:
        return []
    objects = S.bddl_objects(text)
    words = {n: category_words(c) for n, c in objects.items()}
    out: list[SceneFactor] = []
    goal, goal0 = S.bddl_goal(text), S.bddl_goal(official)
    language = S.bddl_language(text)
    if goal != goal0:
        obj = goal[0][1] if len(goal[0]) > 1 else goal[0][0]
        old = goal0[0][1] if len(goal0[0]) > 1 else goal0[0][0]
        out.append(SceneFactor(kind="task", entity=obj, value=words.get(obj, obj)[:200],
                               detail=f"the task asks to move the {words.get(obj, obj)} instead of the {words.get(old, old)}"))
    elif language != S.bddl_language(official):
        out.append(SceneFactor(kind="instruction", entity=None, value=language[:200],
                               detail=f"the instruction is reworded from '{S.bddl_language(official)}'"))
    for obj in (o for o in objects if o in init_regions(text)):
        f = _position_factor(obj, text, official, words)
        if f is not None:
            out.append(f)
    return out


def undo_factor(scenario: LiberoScenario, factor: SceneFactor, seed: int) -> LiberoScenario:
    """The scenario with one factor as the official BDDL has it (placements sampled with `seed`).

    position: the object's official region assignment and ranges (and a swapped partner's); instruction:
    the official language; task: the official goal, objects of interest and language.

    Raises:
        LiberoDiagnosisError: the factor's kind or entity has no official counterpart to restore.
    """
    text, official = scenario.bddl_text(), _official(scenario)
    return _rebuilt(scenario, _with_factor_of(text, official, official, factor, swapped=text, verb="undone"),
                    official, seed)


def transplant_factor(source: LiberoScenario, factor: SceneFactor, base: LiberoScenario, seed: int) -> LiberoScenario:
    """`base` with one factor as `source` has it (same suite and task; placements sampled with `seed`).

    Raises:
        LiberoDiagnosisError: the tasks differ, or the factor cannot be expressed in BDDL.
    """
    if (source.suite, source.task_id) != (base.suite, base.task_id):
        raise LiberoDiagnosisError(f"factor {_name(factor)} cannot be transplanted from suite '{source.suite}' task "
                                   f"{source.task_id} into suite '{base.suite}' task {base.task_id}: tasks differ")
    src, official = source.bddl_text(), _official(base)
    return _rebuilt(base, _with_factor_of(base.bddl_text(), src, official, factor, swapped=src, verb="transplanted"),
                    official, seed)


def factor_edits(factors: Sequence[SceneFactor], scenario: LiberoScenario, tier: str = "train") -> list["FactorEdit"]:
    """The first `MAX_FACTORS` implicated factors of the failed `scenario`, one `FactorEdit` each: applied by
    `transplant_factor` into another scenario of the task, undone by `undo_factor` (placements drawn from
    the verifier's rng; the scenario itself when its BDDL already has the factor as the official task
    does). A swapped position factor names its partner (`swapped_with`): `undo_factor` moves both back.
    `tier` is not used: an instruction factor is the scenario's own language.

    Raises:
        LiberoDiagnosisError: `scenario` is not a LIBERO scenario.
    """
    from coda.sim.backends import FactorEdit

    if not isinstance(scenario, LiberoScenario):
        raise LiberoDiagnosisError(f"factor edits: the scene is a {type(scenario).__name__}, not a LiberoScenario")
    return [FactorEdit(indices=(i,), apply=partial(_transplanted, scenario, f), undo=partial(_undone, scenario, f),
                       ops=({"op": "transplant", "args": {"kind": f.kind, "entity": f.entity}},),
                       swapped_with=_partner(scenario, f))
            for i, f in enumerate(factors[:MAX_FACTORS])]


def _partner(scenario: LiberoScenario, f: SceneFactor) -> str | None:
    """The object a position factor's object swapped official regions with, if any."""
    if f.kind != "position" or f.entity is None:
        return None
    try:
        return swap_partner(scenario.bddl_text(), _official(scenario), f.entity)
    except LiberoError:
        return None


def _seed(rng: Any) -> int:
    return int(rng.integers(2**31))


def _transplanted(source: LiberoScenario, factor: SceneFactor, base: LiberoScenario, rng: Any) -> LiberoScenario:
    return transplant_factor(source, factor, base, _seed(rng))


def _undone(scenario: LiberoScenario, factor: SceneFactor, rng: Any) -> LiberoScenario:
    out = undo_factor(scenario, factor, _seed(rng))
    return scenario if out.bddl_text() == scenario.bddl_text() else out


def same_task(scenario: LiberoScenario, base: Any) -> bool:
    """`base` is another scenario of the same suite and task (a factor of `scenario` transplants into it)."""
    return (isinstance(base, LiberoScenario) and (base.suite, base.task_id) == (scenario.suite, scenario.task_id)
            and base.spec_id != scenario.spec_id)


MODE_TOKENS = ("instruction", "position:other", "position:swap", "position:target", "task")


def mode_tokens(factors: Sequence[SceneFactor], scenario: LiberoScenario | None, where: str = "factors") -> tuple[str, ...]:
    """The failure-mode tokens of verified factors: the role of a moved object — `position:target` (the
    object the BDDL goal moves), `position:other`, or `position:swap` for the two together (they traded
    places, as `swap_regions` makes them) —, `instruction`, `task`; other kinds carry no token.

    Raises:
        LiberoDiagnosisError: a position factor without its scenario.
    """
    tokens: set[str] = set()
    for j, f in enumerate(factors):
        if f.kind == "position":
            if not isinstance(scenario, LiberoScenario):
                raise LiberoDiagnosisError(f"{where}[{j}].entity = {f.entity!r}: no LIBERO scenario given to resolve its role")
            goal = S.bddl_goal(scenario.bddl_text())
            target = str(goal[0][1]) if goal and len(goal[0]) >= 2 else None
            tokens.add("position:target" if f.entity == target else "position:other")
        elif f.kind in ("instruction", "task"):
            tokens.add(str(f.kind))
    if {"position:target", "position:other"} <= tokens:
        tokens = (tokens - {"position:target", "position:other"}) | {"position:swap"}
    return tuple(sorted(tokens))


def check_token(token: str, where: str = "token") -> None:
    """Raise FactorError (naming `where`) when `token` is not one of LIBERO's `MODE_TOKENS`."""
    if token not in MODE_TOKENS:
        raise LiberoDiagnosisError(f"{where} token {token!r} is not a LIBERO mode token: one of {list(MODE_TOKENS)}")


# The BDDL edit that reproduces a verified factor, by mode token (`coda.sim.libero.operators`).
FACTOR_EDITS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "position:target": (("shift_region", {"object": "target"}),),
    "position:other": (("swap_regions", {"a": "target", "b": "other"}),),
    "position:swap": (("swap_regions", {"a": "target", "b": "other"}),),
    "instruction": (("paraphrase", {}),),
    "task": (("change_task", {}),),
}
MAX_LEVEL = 1  # level 0: the tasks a mode failed on; 1: every task of their suites


def mode_program(mode: str, examples: Sequence[LiberoScenario], *, level: int, parent: Any, seed: int, count: int,
                 name: str, reason: str, rediagnose: bool = False) -> dict[str, Any]:
    """A `libero` generation body applying the edits of the mode's factors (`FACTOR_EDITS`) to the tasks it
    failed on, in this round and its lineage's (`failed_tasks`; level 0), or to every task of their suites
    (level 1). `name` is the program's record key (a child's `mode_program.parent`).

    Raises:
        CompileError: a token that is not LIBERO's, or none of the mode's factors has a BDDL edit.
    """
    _, bar, rest = mode.partition("|")
    tokens = rest.split("+") if bar else []
    for t in tokens:
        try:
            check_token(t, f"mode = {mode!r}:")
        except FactorError as e:
            raise CompileError(str(e)) from None
    edits = [e for t in tokens for e in FACTOR_EDITS.get(t, ())]
    if not edits:
        raise CompileError(f"mode = {mode!r}: none of its factors has a LIBERO edit ({sorted(FACTOR_EDITS)})")
    failed = sorted({(s.suite, s.task_id) for s in examples}
                    | {(str(s), int(t)) for s, t in (parent or {}).get("failed_tasks", [])})
    tasks = failed if level == 0 else [(s, t) for s in sorted({s for s, _ in failed}) for t in range(len(S.list_tasks(s)))]
    return {"kind": "libero", "tasks": [list(t) for t in tasks], "failed_tasks": [list(t) for t in failed],
            "edits": [[op, args] for op, args in edits], "seed": seed, "program_key": name,
            "mode_program": {"level": level, "parent": (parent or {}).get("program_key"), "reason": reason,
                             "rediagnose": rediagnose}}


def entity_roles(scenario: LiberoScenario) -> dict[str, str]:
    """The BDDL goal pair's entities by role: what the goal moves (`target`) and where it goes
    (`destination`); other entities have no role. Raises LiberoError for a goal that is not one in / on."""
    from coda.sim.libero.predicates import goal_pair

    text = scenario.bddl_text()
    names = (*S.bddl_objects(text), *S.bddl_fixtures(text))
    obj, target = goal_pair(S.bddl_goal(text), bddl_regions(text), names)
    return {obj: "target", target: "destination"}


def _with_factor_of(text: str, src: str, official: str, factor: SceneFactor, *, swapped: str, verb: str) -> str:
    """`text` with the BDDL parts of one factor copied from `src`: an object's (:init ...) region and its
    ranges (with the object it was swapped with, a swap being read from `swapped` against `official`), the
    (:language ...), or the goal with its objects of interest and language."""
    if factor.kind == "position":
        placed = init_regions(src)
        obj = factor.entity
        if obj is None or obj not in placed or obj not in init_regions(text):
            raise LiberoDiagnosisError(f"factor {_name(factor)} cannot be {verb}: {obj!r} is not an object placed "
                                       f"in both scenarios; placed: {sorted(placed)}")
        partner = swap_partner(swapped, official, obj)
        names = _region_names(src)
        for o in (obj, partner) if partner else (obj,):
            text = _set_init(text, o, placed[o])
            if placed[o] in names:
                text = _copy_rect(text, src, names[placed[o]])
        return text
    if factor.kind == "instruction":
        return _copy_section(text, src, ":language", factor)
    if factor.kind == "task":
        for key in (":goal", ":obj_of_interest", ":language"):
            text = _copy_section(text, src, key, factor)
        return text
    raise LiberoDiagnosisError(f"factor {_name(factor)} cannot be {verb} in LIBERO: only position, instruction "
                               "and task factors can")


__all__ = [
    "FACTOR_EDITS",
    "MAX_FACTORS",
    "MAX_LEVEL",
    "MODE_TOKENS",
    "LiberoDiagnosisError",
    "check_token",
    "entity_roles",
    "mode_program",
    "mode_tokens",
    "factor_edits",
    "same_task",
    "scenario_factors",
    "swap_partner",
    "transplant_factor",
    "undo_factor",
]
