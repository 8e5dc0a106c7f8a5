"""Does keeping the goal's number read at an episode's first chunk help? The final policies of finished runs
rolled out with the number re-read at every chunk (`policy.value_once = false`) and kept from the first chunk
(`true`), on the evaluation scenes of each run's last measured round.

The number a goal gives (how far to open a drawer) is read off the instruction by comparison with the wordings
seen in training, plus a prior from the state of the entity the goal names. The words do not change within an
episode, but the state does: re-read at every chunk, a reading unsure of an unfamiliar wording can slide to
what such states asked in training as the drawer moves. `value_once` is an inference setting: the same
weights, the same scenes, the same per-scene seeds; the entities stay as `policy.ground_once` keeps them.

Writes `bench/results/value_once.json`:

    {run: {"per_chunk" | "value_once": {split: float}, "n": {split: int}, "family": str, "checkpoint": str},
     "changed_episodes": {run: int}}

Usage:
    python bench/value_once.py runs/hl_b16_before/s0_drawer_coda runs/hl_b16_before/s0_drawer_dr ...
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import write_result  # noqa: E402

MODES = {"per_chunk": False, "value_once": True}


def last_evaluation(run: Path) -> tuple[str, Path, list[tuple[str, Any]], Any]:
    """A finished run's family, last checkpoint, the (split, scene) pairs of its last measured round and its
    simulator settings."""
    from coda.engine.loop import resume_run
    from coda.scene.spec import ScenarioSpec
    from headline import final_outcomes

    ctx = resume_run(run)
    try:
        outcomes = final_outcomes(ctx)
        specs = {s.spec_id: s.spec for s in ctx.memory.list("scenario", run_id=ctx.run_id)}
        ckpts = sorted(ctx.memory.list("checkpoint", run_id=ctx.run_id), key=lambda c: c.round)
        ckpt = ctx.run_dir / ckpts[-1].path
        sim = ctx.cfg.sim
    finally:
        ctx.close()
    (family, splits), = outcomes.items()
    pairs = [(split, ScenarioSpec.model_validate(specs[sid])) for split, per in splits.items() for sid in per]
    return family, ckpt, pairs, sim


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from coda.engine.rollout import evaluate_checkpoint

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="finished run directories (one family each)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="value_once", help="name of the result under bench/results/")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"changed_episodes": {}}
    for run in args.runs:
        family, ckpt, pairs, sim = last_evaluation(run)
        splits = sorted({s for s, _ in pairs})
        row: dict[str, Any] = {"family": family, "checkpoint": str(ckpt),
                               "n": {s: sum(1 for x, _ in pairs if x == s) for s in splits}}
        ends = {}
        for mode, on in MODES.items():
            rs = evaluate_checkpoint(ckpt, [spec for _, spec in pairs], sim, workers=args.workers,
                                     record_states=False, overrides={"value_once": on})
            ends[mode] = [(r.success, r.length) for r in rs]
            row[mode] = {s: round(sum(r.success for (x, _), r in zip(pairs, rs) if x == s) / row["n"][s], 3)
                         for s in splits}
            print(f"{run} {mode:10s} " + "  ".join(f"{s} {row[mode][s]:.2f}" for s in splits), flush=True)
        out[str(run)] = row
        out["changed_episodes"][str(run)] = sum(a != b for a, b in zip(ends["per_chunk"], ends["value_once"]))
    print(f"wrote {write_result(args.out, out)}")
    return out


if __name__ == "__main__":
    main()
