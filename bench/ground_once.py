"""Does fixing an episode's grounding at its first chunk help? The learnability checkpoints rolled out with the
pointers re-read every chunk (`policy.ground_once = false`) and with the entities picked at the first chunk
kept for the episode (`true`), on the same evaluation scenes.

The instruction does not change within an episode, but the role pointers also read the layout (positions
relative to the gripper), so as the gripper moves, a pointer unsure of an unfamiliar word can switch the
destination back and forth. `ground_once` is an inference setting: the same weights, the same scenes, the
same per-scene seeds.

Reads the checkpoints `bench/learnability.py` left under --work (its default `main` configuration, one
directory per training seed) and writes `bench/results/ground_once.json`:

    {family: {policy: {"per_chunk" | "ground_once": {split: float}, "n": int}}, "seeds": [...], "work": str}

Usage:
    python bench/ground_once.py --work runs/cal3 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

OUT = Path(__file__).parent / "results" / "ground_once.json"
MODES = {"per_chunk": False, "ground_once": True}


def checkpoints(work: Path, family: str, seed: int) -> dict[str, Path]:
    """The SFT and matched checkpoints of the learnability run's default configuration with training seed
    `seed` (the directories `bench/learnability.py` names by the configuration's digest)."""
    from coda.config import build_config
    from learnability import POLICY, _digest

    cfg = build_config("full", overrides=POLICY + [f"policy.seed={seed}"])
    sft_root = work / family / f"sft-{_digest(cfg, ('policy', 'scene', 'sim'))}"
    out = {"sft": sft_root / "sft.pt", "matched": sft_root / f"main-{_digest(cfg)}" / "matched.pt"}
    for name, path in out.items():
        if not path.exists():
            raise SystemExit(f"no learnability {name} checkpoint of {family} with training seed {seed}: {path} "
                             f"(run bench/learnability.py --work {work} first)")
    return out


def main(argv: list[str] | None = None) -> int:
    from coda.config import build_config
    from coda.engine.rollout import evaluate_checkpoint
    from coda.scene.spec import FAMILIES
    from coda.scene.splits import SPLITS, read_split

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="the --work directory of bench/learnability.py")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES))
    ap.add_argument("--scenes", type=int, default=50, help="evaluation scenes per split (a learnability split file)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    sim = build_config("full").sim
    out: dict[str, Any] = {"seeds": args.seeds, "work": str(args.work)}
    for family in args.families:
        scenes = {s: read_split(args.work / family / "scenes" / f"{s}_s1_n{args.scenes}.jsonl")[1] for s in SPLITS}
        flat = [(s, spec) for s in SPLITS for spec in scenes[s]]
        out[family] = {}
        for name in ("sft", "matched"):
            row: dict[str, Any] = {m: {s: 0.0 for s in SPLITS} for m in MODES}
            for seed in args.seeds:
                ckpt = checkpoints(args.work, family, seed)[name]
                for mode, on in MODES.items():
                    rs = evaluate_checkpoint(ckpt, [spec for _, spec in flat], sim, workers=args.workers,
                                             record_states=False, overrides={"ground_once": on})
                    for (split, _), r in zip(flat, rs):
                        row[mode][split] += r.success / (len(scenes[split]) * len(args.seeds))
            row = {m: {s: round(v, 3) for s, v in per.items()} for m, per in row.items()}
            row["n"] = args.scenes * len(args.seeds)
            out[family][name] = row
            for mode in MODES:
                print(f"{family}/{name} {mode:11s} " + "  ".join(f"{s} {row[mode][s]:.2f}" for s in SPLITS), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
