"""Random scene edits for the baselines: a mutator for ACCEL and replay, a domain-randomisation generator.

In the jaxued / minimax split, this is the *generator* side (the sampler lives in `coda.engine.ued`):

- `random_edit(rng, spec)`: one registered scene operator, drawn uniformly from `MUTATION_OPERATORS`, with
  random valid arguments (`ARG_SAMPLERS`); an operator that does not fit the scene is skipped and another
  is drawn, at most `max_tries` times.
- `mutate(rng, spec, n_edits)`: `n_edits` random edits in a row (the STYLE mutator signature); the child's
  provenance lists every edit (the operators record themselves) and names its parent scene.
- `dr_scene(rng, family, n_edits)`: domain randomisation: a base scene from the training (sft) distribution
  of the family plus `n_edits` random edits over all mutation operators.

Everything is pure given the numpy Generator: the same seed gives byte-identical scenes.

The mutation space is explicit. `MUTATION_OPERATORS` names the operators that may be drawn; an operator
registered later is not drawn until it is added here with an argument sampler (a test checks that every
registered operator is either listed or excluded on purpose in `EXCLUDED_OPERATORS`). Argument ranges are
the module constants below; instructions are only paraphrased with the ``train`` vocabulary tier, because
the ``heldout`` tier is reserved for the instruction evaluation split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from coda.errors import CodaError
from coda.scene.generators import GeneratorError, sample_base
from coda.scene.operators import OPERATORS, OperatorError, apply_operator, goal_names
from coda.scene.regions import PlacementError
from coda.scene.spec import FAMILIES, DrawerSpec, ObjectSpec, ScenarioSpec
from coda.scene.splits import SFT_PARAMS


class MutationError(CodaError, ValueError):
    """A mutation cannot be made: bad arguments, or no operator fits the scene; the message says which."""


# Operators a random edit is drawn from, uniformly. `one_of` is a composition of other operators, not an edit;
# `place_together` is several `place_in_region` edits at once (compiled position modes use it).
MUTATION_OPERATORS: tuple[str, ...] = (
    "place_in_region",
    "swap_positions",
    "move_robot_start",
    "paraphrase",
    "change_task",
    "recolor",
    "resize",
    "reshape",
    "add_distractors",
    "scale_physics",
)
EXCLUDED_OPERATORS: tuple[str, ...] = ("one_of", "place_together")  # registered but never drawn (see above)

GRID_REGIONS: tuple[str, ...] = (
    "near_right", "near", "near_left", "right", "center", "left", "far_right", "far", "far_left",
)  # the 3 x 3 table grid: where place_in_region may move an entity
RESIZE_SCALE = (0.75, 1.35)  # range of the uniform size factor (the operator keeps role limits)
DISTRACTOR_COUNTS = (1, 2)  # distractors added per edit, drawn uniformly
DISTRACTOR_REGIONS = ("table", "near_target")  # where distractors go
FRICTION_SCALE = (0.3, 2.5)  # range of the friction scale
MASS_SCALE = (0.3, 4.0)  # range of the mass scale
DAMPING_FACTOR = (0.1, 6.0)  # range of the factor on drawer slide damping (drawer scenes only)
PARAPHRASE_TIER = "train"  # never "heldout": that vocabulary is reserved for evaluation
DEFAULT_MAX_TRIES = 50  # operator draws per edit before MutationError

_RETRYABLE = (OperatorError, PlacementError)  # the edit did not fit this scene: draw another
_BASE_RETRYABLE = (PlacementError, GeneratorError)  # the base layout could not be completed: redraw it

ArgSampler = Callable[[np.random.Generator, ScenarioSpec], "dict[str, Any] | None"]


# ---- argument samplers: (rng, spec) -> operator arguments, or None when the operator cannot fit -----


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _refs(spec: ScenarioSpec, objects_only: bool = False) -> list[str]:
    """The entity references (see coda.scene.operators) that resolve in this scene."""
    in_goal = set(goal_names(spec))
    args = spec.goal[0].args
    kinds: dict[str, Any] = {"target": spec.entity(args[0])}
    if len(args) > 1:
        kinds["goal"] = spec.entity(args[1])
    out = [r for r, e in kinds.items() if not objects_only or isinstance(e, ObjectSpec)]
    fixtures = [c.name for c in spec.containers] + [r.name for r in spec.regions]
    if not objects_only and any(n not in in_goal for n in fixtures):
        out.append("alt")
    if any(o.name not in in_goal for o in spec.objects):
        out.append("other")
    return out


def _place_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    refs = _refs(spec)
    return {"object": _pick(rng, refs), "region": _pick(rng, GRID_REGIONS)} if refs else None


def _swap_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    refs = _refs(spec)
    pairs: list[tuple[str, str]] = [
        (a, b) for a, b in (("target", "other"), ("target", "goal"), ("goal", "alt")) if a in refs and b in refs
    ]
    pairs = [(a, b) for a, b in pairs if not any(isinstance(spec.entity(n), DrawerSpec) for n in _named(spec, a, b))]
    others = [o.name for o in spec.objects if o.name not in set(goal_names(spec))]
    if len(others) >= 2:  # two objects outside the goal, by name (drawer scenes have no other pair)
        i, j = rng.choice(len(others), size=2, replace=False)
        pairs.append((others[int(i)], others[int(j)]))
    if not pairs:
        return None
    a, b = _pick(rng, pairs)
    return {"a": a, "b": b}


def _named(spec: ScenarioSpec, *refs: str) -> list[str]:
    """Names of the fixed references ('target', 'goal') among `refs` (pool references resolve later)."""
    args = spec.goal[0].args
    fixed = {"target": args[0], "goal": args[1] if len(args) > 1 else args[0]}
    return [fixed[r] for r in refs if r in fixed]


def _robot_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    return {}  # the operator's own default ranges


def _paraphrase_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    return {"tier": PARAPHRASE_TIER}


def _task_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    return {"change": "any"}


def _recolor_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    refs = _refs(spec)
    return {"object": _pick(rng, refs)} if refs else None


def _resize_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    refs = _refs(spec, objects_only=True)
    return {"object": _pick(rng, refs), "scale": list(RESIZE_SCALE)} if refs else None


def _reshape_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    refs = _refs(spec, objects_only=True)
    return {"object": _pick(rng, refs)} if refs else None


def _distractor_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    return {
        "n": int(_pick(rng, DISTRACTOR_COUNTS)),
        "kind": _pick(rng, ("random", "lookalike")),
        "region": _pick(rng, DISTRACTOR_REGIONS),
    }


def _physics_args(rng: np.random.Generator, spec: ScenarioSpec) -> dict[str, Any] | None:
    ranges = {"friction": FRICTION_SCALE, "mass": MASS_SCALE}
    if spec.drawers:
        ranges["damping"] = DAMPING_FACTOR
    key = _pick(rng, sorted(ranges))
    return {key: list(ranges[key])}


ARG_SAMPLERS: dict[str, ArgSampler] = {
    "place_in_region": _place_args,
    "swap_positions": _swap_args,
    "move_robot_start": _robot_args,
    "paraphrase": _paraphrase_args,
    "change_task": _task_args,
    "recolor": _recolor_args,
    "resize": _resize_args,
    "reshape": _reshape_args,
    "add_distractors": _distractor_args,
    "scale_physics": _physics_args,
}


# ---- mutators ----------------------------------------------------------------------------------------


def _check_operators(operators: Sequence[str]) -> tuple[str, ...]:
    ops = tuple(operators)
    if not ops:
        raise MutationError("operators = (): a mutation needs at least one operator")
    for op in ops:
        if op not in ARG_SAMPLERS:
            raise MutationError(f"operator '{op}' has no argument sampler for mutation. Available: {sorted(ARG_SAMPLERS)}")
        OPERATORS.get(op)  # a sampler for an operator that was never registered is a RegistryError
    return ops


def _check_count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise MutationError(f"{name} = {value!r} must be an integer >= {low}")
    return int(value)


def random_edit(
    rng: np.random.Generator,
    spec: ScenarioSpec,
    *,
    operators: Sequence[str] = MUTATION_OPERATORS,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> ScenarioSpec:
    """One random edit: an operator drawn uniformly from `operators`, with random valid arguments.

    An operator that does not fit the scene (no entity of the kind it needs, an infeasible result, a
    crowded region) is skipped and another is drawn, so the applied operator is uniform over those that fit.

    Args:
        rng: the only source of randomness.
        spec: the scene to edit.
        operators: names from `ARG_SAMPLERS` to draw from (default: all of `MUTATION_OPERATORS`).
        max_tries: operator draws before giving up.

    Returns:
        The edited scene; the operator appended itself to `provenance.operators`.

    Raises:
        MutationError: bad `operators`/`max_tries`, or no draw fitted the scene within `max_tries`.
    """
    ops = _check_operators(operators)
    tries = _check_count("max_tries", max_tries, 1)
    skipped: dict[str, str] = {}
    for _ in range(tries):
        op = ops[int(rng.integers(len(ops)))]
        args = ARG_SAMPLERS[op](rng, spec)
        if args is None:
            skipped[op] = f"no entity in this {spec.family} scene fits it"
            continue
        try:
            return apply_operator(rng, spec, op, args)
        except _RETRYABLE as e:
            skipped[op] = str(e)
    reasons = "; ".join(f"{k}: {v}" for k, v in sorted(skipped.items()))
    raise MutationError(f"no operator of {list(ops)} fits scene {spec.spec_id} after {tries} tries ({reasons})")


def mutate(
    rng: np.random.Generator,
    spec: ScenarioSpec,
    n_edits: int,
    *,
    operators: Sequence[str] = MUTATION_OPERATORS,
    program: str = "mutate",
    max_tries: int = DEFAULT_MAX_TRIES,
) -> ScenarioSpec:
    """A child scene: `n_edits` random edits of `spec` in a row (the mutator of ACCEL and replay).

    Args:
        rng: the only source of randomness (same seed -> byte-identical child).
        spec: the parent scene.
        n_edits: number of edits (>= 1).
        operators: operators to draw from (default `MUTATION_OPERATORS`).
        program: recorded as the child's `provenance.program`.
        max_tries: operator draws per edit before giving up.

    Returns:
        The child: its provenance lists the parent's operators plus one entry per edit, `parent` is the
        parent's spec_id and `split` is cleared (a child belongs to no benchmark split).

    Raises:
        MutationError: bad arguments, or an edit for which no operator fits.
    """
    n = _check_count("n_edits", n_edits, 1)
    if not isinstance(spec, ScenarioSpec):
        raise MutationError(f"spec must be a ScenarioSpec, got {type(spec).__name__}")
    parent = spec.spec_id
    child = spec
    for _ in range(n):
        child = random_edit(rng, child, operators=operators, max_tries=max_tries)
    prov = child.provenance.model_copy(update={"parent": parent, "program": program, "split": None})
    return child.replace(provenance=prov)


def dr_scene(
    rng: np.random.Generator,
    family: str,
    n_edits: int,
    *,
    operators: Sequence[str] = MUTATION_OPERATORS,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> ScenarioSpec:
    """Domain randomisation: a base scene of the training (sft) distribution plus `n_edits` random edits.

    The base is `sample_base(family, rng, SFT_PARAMS[family])`, the layout the sft split draws from; each
    edit is drawn uniformly over `operators` (default: all of `MUTATION_OPERATORS`).

    Args:
        rng: the only source of randomness (same seed -> byte-identical scene).
        family: one of FAMILIES.
        n_edits: random edits on top of the base (0 = a plain training-distribution scene).
        operators: operators to draw from.
        max_tries: redraws of a base layout that cannot be completed, and operator draws per edit.

    Returns:
        The scene, with `provenance.program = "dr"` and `parent` = the base scene's spec_id (when edited).

    Raises:
        MutationError: unknown family, bad counts, or no base/edit could be made within `max_tries`.
    """
    if family not in FAMILIES:
        raise MutationError(f"family = {family!r} is unknown. Available: {list(FAMILIES)}")
    n = _check_count("n_edits", n_edits, 0)
    tries = _check_count("max_tries", max_tries, 1)
    _check_operators(operators)
    last: Exception | None = None
    for _ in range(tries):
        try:
            base = sample_base(family, rng, SFT_PARAMS[family])
            break
        except _BASE_RETRYABLE as e:
            last = e
    else:
        raise MutationError(f"dr_scene: no {family} base scene could be laid out in {tries} tries; last error: {last}")
    if n == 0:
        return base.replace(provenance=base.provenance.model_copy(update={"program": "dr"}))
    return mutate(rng, base, n, operators=operators, program="dr", max_tries=tries)


__all__ = [
    "ARG_SAMPLERS",
    "EXCLUDED_OPERATORS",
    "MUTATION_OPERATORS",
    "MutationError",
    "dr_scene",
    "mutate",
    "random_edit",
]
