"""Why does a policy fail a split? Each failed episode classed by what it moved, from the simulator's state.

For every scene of the split files given, the checkpoint's policy is rolled out once (as the evaluation does)
and each failure is put in one class:

- `wrong_object`: the object that moved most is not the one the goal names (it acted on another object);
- `right_object`: the named object moved most, but the goal does not hold at the end (placement, grasp, slip);
- `still`: no object moved more than 2 cm.

A `right_object` failure of a goal with a destination region (`at_region`) is split further by where the
object ended: `right_object_other_region` when its centre ended nearer another region of the scene than the
named one (the destination was misread), else `right_object` (it went for the named region and missed).

For a drawer goal (`drawer_fraction`) it counts instead where the drawer ended, to the nearest quarter
(`final_fraction`), beside the fraction asked for.

Writes a JSON `{split: {"n", "success", "failures": {class: count}}}` (drawer splits: `{"n", "success",
"asked": {fraction: count}, "final_fraction": {fraction: count}}`; default `bench/results/grounding_failures.json`).

Usage:
    python bench/grounding_failures.py CKPT SPLIT.jsonl [SPLIT.jsonl ...] --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from coda.config import build_config  # noqa: E402
from coda.scene.splits import read_split  # noqa: E402

OUT = Path(__file__).parent / "results" / "grounding_failures.json"
MOVED = 0.02  # metres: an object moved if its centre travelled further than this


def classify(rollout: Any) -> str:
    """The failure class of one failed rollout (see the module docstring)."""
    first, last = rollout.states[0], rollout.states[-1]
    objects = [n for n, k in zip(first.names, first.kinds) if k == "object"]
    moved = {n: float(np.linalg.norm(last.pos[last.index[n], :2] - first.pos[first.index[n], :2])) for n in objects}
    target = rollout.spec.goal[0].args[0]
    top = max(moved, key=moved.get)
    if moved[top] < MOVED:
        return "still"
    if top != target:
        return "wrong_object"
    goal = rollout.spec.goal[0]
    regions = {r.name: np.asarray(r.center, float) for r in rollout.spec.regions}
    if goal.name == "at_region" and len(regions) > 1:
        end = last.pos[last.index[target], :2]
        nearest = min(regions, key=lambda n: float(np.linalg.norm(end - regions[n])))
        if nearest != goal.args[1]:
            return "right_object_other_region"
    return "right_object"


def main(argv: list[str] | None = None) -> int:
    from coda.engine.rollout import evaluate_checkpoint

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("splits", type=Path, nargs="+", help="split files (coda scenes make)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    sim = build_config("full").sim
    out: dict[str, Any] = {"checkpoint": str(args.checkpoint)}
    for path in args.splits:
        meta, specs = read_split(path)
        rollouts = evaluate_checkpoint(args.checkpoint, specs, sim, workers=args.workers, record_states=True)
        name = f"{meta.get('family', '?')}/{meta.get('split', path.stem)}"
        out[name] = {"n": len(rollouts), "success": sum(r.success for r in rollouts) / max(1, len(rollouts))}
        if all(s.goal[0].name == "drawer_fraction" for s in specs):
            def quarter(x: float) -> str:
                return f"{round(x * 4) / 4:.2f}"
            asked = Counter(quarter(s.goal[0].value) for s in specs)
            final = Counter(quarter(float(r.states[-1].fraction[r.states[-1].index[r.spec.goal[0].args[0]]]))
                            for r in rollouts)
            out[name].update(asked=dict(sorted(asked.items())), final_fraction=dict(sorted(final.items())))
        else:
            counts: dict[str, int] = {"wrong_object": 0, "right_object": 0, "right_object_other_region": 0,
                                      "still": 0}
            for r in rollouts:
                if not r.success:
                    counts[classify(r)] += 1
            out[name]["failures"] = counts
        print(name, json.dumps(out[name]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
