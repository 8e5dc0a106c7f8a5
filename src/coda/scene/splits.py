"""The built-in benchmark's splits: one narrow training split and six held-out OOD splits per family.

Every split is a `GenerationProgram` (data, see `split_program`), so a split is reproducible from
(family, split, n, seed, SPLITS_VERSION):

- ``sft`` — the narrow training distribution. As in LIBERO, a policy can succeed by memorising where to
  go: the target always starts in the same 6 cm spot (`spot_left`, always the leftmost object; push:
  `spot_center`), the destination always sits in the same spot (`spot_far`), the other objects stay in one
  strip, only four object colours and boxes appear, and the instruction is the single canonical template.
- ``position`` — unseen regions for the target or the destination, or swapped layouts (target <-> another
  object, destination <-> the alternative container / region); drawer: the cabinet in an unseen far
  corner, or the gripper's start pose moved.
- ``instruction`` — the sft scene with a held-out paraphrase (templates and synonyms never used in sft or
  in the train paraphrase tier).
- ``task`` — the sft scene with another goal in the same layout: another target, another destination, or
  (drawer) another opening fraction.
- ``object`` — the sft scene with the target (or destination) in an unseen colour, size or shape.
- ``distractor`` — the sft scene plus look-alike distractors near the target or random ones.
- ``physics`` — the sft scene with friction or mass scaled (drawer: slide damping).

The OOD splits derive from the sft program with the same per-scene random stream, so with equal seeds
scene i of every OOD split is scene i of `sft` plus one factor (a paired comparison) — use a different seed
for evaluation than for training data. Splits are generated on demand rather than shipped: generation is
deterministic and byte-identical per (family, split, n, seed), every file carries `SPLITS_VERSION` in its
header, and any change to the generators that alters a split must bump `SPLITS_VERSION`
(`tests/scene/test_splits.py` pins digests of small splits so such a change cannot go unnoticed).
With a simulator, `build_split` keeps only scenes that pass a validity check and returns the rejected ones
with their reasons.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.errors import CodaError, SchemaVersionError
from coda.scene.programs import GenerationProgram, iter_program, make_scene, scene_with_base
from coda.scene.spec import FAMILIES, SCHEMA_VERSION, ScenarioSpec, SpecError

SPLITS_VERSION = 1  # bump whenever generated split contents change
SPLITS = ("sft", "position", "instruction", "task", "object", "distractor", "physics")
OOD_SPLITS = SPLITS[1:]

SFT_COLORS = ("red", "green", "blue", "yellow")  # object colours seen in training
UNSEEN_COLORS = ("orange", "purple", "pink", "cyan")  # object colours only the object split uses
SFT_FIXTURES = ("gray", "white")  # container / cabinet colours in sft
UNSEEN_FIXTURES = ("black", "brown", "purple", "orange")  # cabinet colours only the object split uses
SFT_REGION_COLORS = ("green", "blue")  # push region colours in sft


class SplitError(CodaError, ValueError):
    """Unknown family/split, or a malformed split file; the message names the field, line or value."""


def _op(op: str, **args: Any) -> dict[str, Any]:
    return {"op": op, "args": args}


def _one_of(*options: list[dict[str, Any]]) -> dict[str, Any]:
    return _op("one_of", options=[list(o) for o in options])


_COMMON_SFT = dict(colors=SFT_COLORS, fixture_colors=SFT_FIXTURES, max_yaw=0.2)

# The narrow training layout of each family (BaseParams fields).
SFT_PARAMS: dict[str, dict[str, Any]] = {
    "pick_place": dict(
        _COMMON_SFT, target_region="spot_left", goal_region="spot_far", alt_region="spot_near",
        others_region="band_mid_right", n_others=(2, 2), target_shapes=("box",), other_shapes=("box",),
        target_half=(0.02, 0.025), block_prob=0.3, container_kinds=("tray",),
    ),
    "stack": dict(
        _COMMON_SFT, target_region="spot_left", goal_region="spot_far", others_region="band_mid_right",
        n_others=(2, 2), other_shapes=("box",), target_half=(0.02, 0.023), block_prob=0.0,
    ),
    "push": dict(
        _COMMON_SFT, target_region="spot_center", goal_region="spot_far", alt_region="near_left",
        wide_region="far_right", others_region="near_right", n_others=(1, 1), target_shapes=("box",), other_shapes=("box",),
        push_half=(0.05, 0.056), region_colors=SFT_REGION_COLORS,
    ),
    "drawer": dict(
        _COMMON_SFT, goal_region="spot_far", others_region="table", n_others=(1, 2), other_shapes=("box",),
        drawer_start=0.0, drawer_goal="open",
    ),
}

_TARGET_UNSEEN = ["near_left", "near_right", "far_left", "far_right", "right", "center"]
_DISTRACTORS = _one_of(
    [_op("add_distractors", n=[1, 2], kind="lookalike", region="near_target")],
    [_op("add_distractors", n=[2, 3], kind="random", region="table")],
)
_PHYSICS = _one_of(
    [_op("scale_physics", friction=[0.3, 0.5])],
    [_op("scale_physics", friction=[1.8, 2.5])],
    [_op("scale_physics", mass=[2.5, 4.0])],
    [_op("scale_physics", mass=[0.3, 0.5])],
)

# The single-factor edit that defines each OOD split, per family.
SPLIT_OPS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "pick_place": {
        "position": [_one_of(
            [_op("place_in_region", object="target", region=_TARGET_UNSEEN)],
            [_op("swap_positions", a="target", b="other")],
            [_op("swap_positions", a="goal", b="alt")],
            [_op("place_in_region", object="goal", region=["far_left", "far_right"])],
        )],
        "object": [_one_of(
            [_op("recolor", object="target", colors=list(UNSEEN_COLORS))],
            [_op("resize", object="target", half=[0.015, 0.018])],
            [_op("resize", object="target", half=[0.027, 0.03])],
            [_op("reshape", object="target", shapes=["cylinder"])],
        )],
    },
    "stack": {
        "position": [_one_of(
            [_op("place_in_region", object="target", region=_TARGET_UNSEEN)],
            [_op("swap_positions", a="target", b="other")],
            [_op("place_in_region", object="goal", region=["far_left", "far_right", "near_left", "near_right", "near"])],
            [_op("swap_positions", a="target", b="goal")],
        )],
        "object": [_one_of(
            [_op("recolor", object="target", colors=list(UNSEEN_COLORS))],
            [_op("recolor", object="goal", colors=list(UNSEEN_COLORS))],
            [_op("resize", object="target", half=[0.015, 0.018])],
        )],
    },
    "push": {
        "position": [_one_of(
            [_op("place_in_region", object="target", region=["near", "near_right", "left", "right", "center"])],
            [_op("place_in_region", object="goal", region=["far_left", "far_right", "left", "right"])],
            [_op("swap_positions", a="goal", b="alt")],
        )],
        "distractor": [_one_of(
            [_op("add_distractors", n=[1, 2], kind="lookalike", region="table")],
            [_op("add_distractors", n=[2, 3], kind="random", region="table")],
        )],
        "object": [_one_of(
            [_op("recolor", object="target", colors=list(UNSEEN_COLORS))],
            [_op("resize", object="target", half=[0.058, 0.065])],
            [_op("reshape", object="target", shapes=["cylinder"])],
        )],
    },
    "drawer": {
        "position": [_one_of(
            [_op("place_in_region", object="target", region=["far_left", "far_right"])],
            [_op("move_robot_start", dx=[0.0, 0.1], dy=[-0.15, 0.15], dz=[-0.05, 0.05])],
        )],
        "object": [_op("recolor", object="target", colors=list(UNSEEN_FIXTURES))],
        "task": [_op("change_task", change="fraction")],
        "distractor": [_op("add_distractors", n=[2, 3], kind="random", region="table")],
        "physics": [_one_of(
            [_op("scale_physics", damping=[3.0, 6.0])],
            [_op("scale_physics", damping=[0.1, 0.3])],
        )],
    },
}
for _fam in FAMILIES:
    _ops = SPLIT_OPS[_fam]
    _ops.setdefault("instruction", [_op("paraphrase", tier="heldout", p_synonym=0.8)])
    _ops.setdefault("task", [_op("change_task", change="any")])
    _ops.setdefault("distractor", [_DISTRACTORS])
    _ops.setdefault("physics", [_PHYSICS])


def _check_names(family: str, split: str) -> None:
    if family not in FAMILIES:
        raise SplitError(f"Unknown family '{family}'. Available: {list(FAMILIES)}")
    if split not in SPLITS:
        raise SplitError(f"Unknown split '{split}'. Available: {list(SPLITS)}")


def split_program(family: str, split: str, n: int, seed: int) -> GenerationProgram:
    """The generation program of a split (sft: the narrow base; OOD: sft + the split's operators)."""
    _check_names(family, split)
    name = f"{family}/{split}@v{SPLITS_VERSION}"
    if split == "sft":
        base: dict[str, Any] = {"family": family, "params": SFT_PARAMS[family]}
        ops: list[dict[str, Any]] = []
    else:
        base = {"family": family, "split": "sft"}
        ops = SPLIT_OPS[family][split]
    return GenerationProgram.model_validate({"name": name, "base": base, "ops": ops, "seed": seed, "budget": n})


def _tag(spec: ScenarioSpec, split: str) -> ScenarioSpec:
    return spec.replace(provenance=spec.provenance.model_copy(update={"split": split}))


def make_split(family: str, split: str, n: int, seed: int) -> list[ScenarioSpec]:
    """`n` scenes of a split, unchecked by physics; pure (same arguments -> identical scenes).

    Raises:
        SplitError: unknown family or split. ProgramError: a scene could not be laid out.
    """
    if n < 1:
        raise SplitError(f"n = {n}: a split needs at least one scene")
    program = split_program(family, split, n, seed)
    return [_tag(make_scene(program, i), split) for i in range(n)]


def paired_base(spec: ScenarioSpec, seed: int, max_candidates: int = 200) -> ScenarioSpec:
    """The `sft` scene an OOD split's scene was derived from: the same scene without the split's edit.

    Args:
        spec: a scene of an OOD split (`provenance.split`), generated with `seed`.
        seed: the split's seed.
        max_candidates: how far down the split's candidate stream to look for `spec`.

    Raises:
        SplitError: `spec` is not an OOD split's scene, or it is not among the first `max_candidates`
            candidates of its split at `seed`.
    """
    split = spec.provenance.split
    if split not in OOD_SPLITS:
        raise SplitError(f"provenance.split = {split!r}: paired_base needs a scene of an OOD split {list(OOD_SPLITS)}")
    program = split_program(spec.family, split, 1, seed)
    for i in range(max_candidates):
        scene, base = scene_with_base(program, i)
        if _tag(scene, split).spec_id == spec.spec_id:
            return base
    raise SplitError(f"scene {spec.spec_id} is not among the first {max_candidates} candidates of "
                     f"{spec.family}/{split} at seed {seed}")


# ---- validity-filtered splits ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rejected:
    """A generated scene that failed the validity check, with the reason."""

    spec: ScenarioSpec
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class SplitResult:
    """Valid scenes (in generation order) and the rejected candidates with reasons."""

    valid: list[ScenarioSpec]
    rejected: list[Rejected]

    def reasons(self) -> dict[str, int]:
        """Rejection counts per reason."""
        out: dict[str, int] = {}
        for r in self.rejected:
            out[r.reason] = out.get(r.reason, 0) + 1
        return dict(sorted(out.items()))


Check = Callable[[ScenarioSpec], tuple[bool, str, dict[str, Any]]]


def build_split(
    family: str,
    split: str,
    n: int,
    seed: int,
    *,
    check: Check,
    max_candidates: int | None = None,
    workers: int = 1,
    check_many: Callable[[list[ScenarioSpec]], Sequence[tuple[bool, str, Any]]] | None = None,
) -> SplitResult:
    """The first `n` scenes of a split's candidate stream that pass `check` (the simulator's, for real splits).

    The result does not depend on `workers`: candidates are judged in order and the stream stops at the
    n-th valid one.

    Args:
        family, split, n, seed: as in make_split.
        check: spec -> (valid, reason, details), e.g. `coda.sim.tabletop.validity.sim_check` (physics + expert).
        max_candidates: stop after this many candidates (default 3 n + 20).
        workers: processes that run the check (the check must be picklable when workers > 1).
        check_many: checks a batch of scenes, results in order, in place of `check` and the processes made
            here (a round backend's workers, which may run anywhere); `workers` still sizes the batches.

    Returns:
        SplitResult(valid, rejected); len(valid) < n if the candidate budget ran out.
    """
    _check_names(family, split)
    budget = max_candidates if max_candidates is not None else 3 * n + 20
    program = split_program(family, split, n, seed)
    stream = (_tag(s, split) for s in iter_program(program))
    valid: list[ScenarioSpec] = []
    rejected: list[Rejected] = []
    seen = 0
    pool = ProcessPoolExecutor(workers) if workers > 1 and check_many is None else None
    try:
        while len(valid) < n and seen < budget:
            want = min(budget - seen, max(workers, int((n - len(valid)) * 1.2) + 1))
            batch = [next(stream) for _ in range(want)]
            seen += len(batch)
            if check_many is not None:
                results = list(check_many(batch))
            else:
                results = list(pool.map(check, batch)) if pool else [check(s) for s in batch]
            for spec, (ok, reason, details) in zip(batch, results):
                if len(valid) >= n:
                    break
                if ok:
                    valid.append(spec)
                else:
                    rejected.append(Rejected(spec, reason, details))
    finally:
        if pool:
            pool.shutdown()
    return SplitResult(valid, rejected)


# ---- files -----------------------------------------------------------------------------------------

HEADER_KEY = "coda_split"


def write_split(path: str | Path, specs: Sequence[ScenarioSpec], **meta: Any) -> Path:
    """Write scenes as versioned JSONL: a header line, then one canonical spec JSON per line.

    The header is `{"coda_split": SPLITS_VERSION, "schema_version": ..., "n": len(specs), **meta}` with
    sorted keys, so the same scenes and metadata give byte-identical files.
    """
    header = {HEADER_KEY: SPLITS_VERSION, "schema_version": SCHEMA_VERSION, "n": len(specs), **meta}
    lines = [json.dumps(header, sort_keys=True, separators=(",", ":"))] + [s.to_json() for s in specs]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def read_split(path: str | Path) -> tuple[dict[str, Any], list[ScenarioSpec]]:
    """Read a split file written by `write_split`. Returns (header, scenes).

    Raises:
        SplitError: missing file, missing/malformed header, wrong scene count, or a bad scene line (the
            message names the file, the line and the field). SchemaVersionError: written by a newer CoDA.
    """
    p = Path(path)
    if not p.is_file():
        raise SplitError(f"split file '{p}' does not exist")
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise SplitError(f"split file '{p}' is empty")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as e:
        raise SplitError(f"{p} line 1: header is not JSON ({e.msg})") from None
    if not isinstance(header, dict) or HEADER_KEY not in header:
        raise SplitError(f"{p} line 1: missing header field '{HEADER_KEY}' (not a CoDA split file)")
    version = header[HEADER_KEY]
    if not isinstance(version, int):
        raise SplitError(f"{p} line 1: header field '{HEADER_KEY}' = {version!r} must be an integer")
    if version > SPLITS_VERSION:
        raise SchemaVersionError(
            f"{p} line 1: header field '{HEADER_KEY}' = {version} is newer than this CoDA reads ({SPLITS_VERSION}); upgrade coda"
        )
    specs = []
    for k, line in enumerate(lines[1:], start=2):
        try:
            specs.append(ScenarioSpec.from_json(line))
        except (SpecError, SchemaVersionError) as e:
            raise type(e)(f"{p} line {k}: {e}") from None
    if header.get("n") is not None and header["n"] != len(specs):
        raise SplitError(f"{p} line 1: header field 'n' = {header['n']} but the file holds {len(specs)} scenes")
    return header, specs
