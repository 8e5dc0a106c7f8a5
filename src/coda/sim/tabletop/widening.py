"""A failure mode's operator calls, widened with its generation program's level.

`coda.sim.tabletop.programs` turns each factor token of a mode into level-0 operator calls (`factor_ops`); `widen`
spreads them over more of the scene space as the level grows (the table in `coda.sim.tabletop.programs`'
docstring), `combined_factors` adds one factor of another axis to a share of the scenes from level 2 on, and
`merge_placements` places the entities of several position factors together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coda.scene.regions import GRID_REGIONS
from coda.scene.spec import PALETTE

PHYSICS_MAX = {"friction": 5.0, "mass": 10.0}  # PhysicsSpec bounds


def _grid_cell(region: str) -> str | None:
    """The 3 x 3 grid cell a region lies in (itself for a grid cell), or None for table-wide strips."""
    if region in GRID_REGIONS:
        return region
    if region.startswith("spot_") and region[5:] in GRID_REGIONS:
        return region[5:]
    return None


def _cell_rc(cell: str) -> tuple[int, int]:
    r = 0 if cell.startswith("near") else (2 if cell.startswith("far") else 1)
    c = 0 if cell.endswith("right") else (2 if cell.endswith("left") else 1)
    return r, c


def neighbourhood(region: str, level: int) -> list[str]:
    """Regions a position factor spreads over at `level`: the region itself at 0; then grid cells within
    Manhattan distance level - 1 of its cell for a 6 cm spot (level for a grid cell); the table for strips."""
    if level <= 0:
        return [region]
    cell = _grid_cell(region)
    if cell is None:
        return [region, "table"] if region != "table" else ["table"]
    radius = level - 1 if region != cell else level
    r0, c0 = _cell_rc(cell)
    near = [g for g in GRID_REGIONS if abs(_cell_rc(g)[0] - r0) + abs(_cell_rc(g)[1] - c0) <= radius]
    return ([region] if region != cell else []) + sorted(near, key=lambda g: (g != cell, g))


def widen(token: str, ops: list[dict[str, Any]], level: int) -> list[dict[str, Any]]:
    """The level-0 operator calls of a factor, widened to `level` (see `coda.sim.tabletop.programs`' docstring)."""
    if level == 0:
        return ops
    op = dict(ops[0])
    args = dict(op["args"])
    name = op["op"]
    if name == "place_in_region":
        regions = neighbourhood(args["region"], level)
        args["region"] = regions[0] if len(regions) == 1 else regions
    elif name == "move_robot_start":
        s = 1.0 + 0.5 * level
        args.update(dx=[round(-0.03 * s, 4), round(0.08 * s, 4)], dy=[round(-0.15 * s, 4), round(0.15 * s, 4)])
    elif name == "recolor" and args.get("colors"):
        palette = list(PALETTE)
        i = palette.index(args["colors"][0])
        more = [palette[(i + k) % len(palette)] for k in range(1, 2 * level + 1)]
        args["colors"] = None if len(more) + 1 >= len(palette) else [args["colors"][0], *more]
    elif name == "resize":
        lo, hi = args["scale"]
        args["scale"] = [round(max(0.5, lo - 0.05 * level), 4), round(hi + 0.1 * level, 4)]
    elif name == "reshape":
        args["shapes"] = ["box", "cylinder", "sphere"]
    elif name == "add_distractors":
        n = [1, min(6, 1 + level)]
        near = {"op": "add_distractors", "args": {"n": n, "kind": "lookalike", "region": "near_target"}}
        if level < 2:
            return [near]
        anywhere = {"op": "add_distractors", "args": {"n": [1, min(6, level)], "kind": "random", "region": "table"}}
        return [{"op": "one_of", "args": {"options": [[near], [anywhere]], "weights": [level, 1]}}]
    elif name == "scale_physics":
        for k, (lo, hi) in list(args.items()):
            mid = (lo + hi) / 2
            w = 0.1 * (1 + level)
            top = PHYSICS_MAX.get(k, 10.0)
            args[k] = [round(max(0.05, mid * (1 - w)), 4), round(min(top, mid * (1 + w)), 4)]
    elif name == "paraphrase":
        para = {"op": "paraphrase", "args": args}
        task = [{"op": "change_task", "args": {"change": "any"}}, para]
        return [{"op": "one_of", "args": {"options": [[para], task], "weights": [2, level]}}]
    elif name == "change_task":
        reword = {"op": "paraphrase", "args": {"tier": "train", "p_synonym": 0.7}}
        return [op, {"op": "one_of", "args": {"options": [[], [reword]], "weights": [2, level]}}]
    op["args"] = args
    return [op, *ops[1:]]


def combined_factors(tokens: Sequence[str], family: str, level: int) -> list[dict[str, Any]]:
    """From level 2: one factor of another axis on a share of the scenes (combined factors)."""
    if level < 2:
        return []
    kinds = {t.split(":")[0].split("@")[0] for t in tokens}
    options: list[list[dict[str, Any]]] = []
    if "position:robot_start" not in tokens:
        options.append([{"op": "move_robot_start", "args": {}}])
    if "distractor" not in kinds:
        options.append([{"op": "add_distractors", "args": {"n": 1, "kind": "random", "region": "table"}}])
    if "physics" not in kinds:
        key = "damping" if family == "drawer" else "friction"
        options.append([{"op": "scale_physics", "args": {key: [0.7, 1.3]}}])
    if not {"instruction", "task"} & kinds:  # those modes reword already
        options.append([{"op": "paraphrase", "args": {"tier": "train", "p_synonym": 0.5}}])
    if not options:
        return []
    weights = [1.0] + [(level - 1) / len(options)] * len(options)
    return [{"op": "one_of", "args": {"options": [[], *options], "weights": weights}}]


def merge_placements(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two or more `place_in_region` calls become one `place_together` (at the first one's place): placed one
    after another, an entity can block where another must go (push trains its goal region where a `far`
    target goes, and its target where a `center` goal goes), placed together they can trade areas."""
    places = [i for i, op in enumerate(ops) if op["op"] == "place_in_region"]
    if len(places) < 2:
        return ops
    out = [op for i, op in enumerate(ops) if i not in places[1:]]  # the first place keeps its index
    out[places[0]] = {"op": "place_together", "args": {"places": [dict(ops[i]["args"]) for i in places]}}
    return out


__all__ = ["PHYSICS_MAX", "combined_factors", "merge_placements", "neighbourhood", "widen"]
