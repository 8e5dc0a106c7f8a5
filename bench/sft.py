"""SFT baseline: behaviour cloning per family on the `sft` split, success in distribution and on every OOD split.

For each family: the first N valid scenes (built, settled, solved by the scripted expert) of the family's
`sft` split with seed 0 become expert demonstrations; the action-chunk policy is trained on them by plain
behaviour cloning (`improvement = "bc"`, no critic); it is then rolled out on valid scenes of every split
with seed 1 (the in-distribution `sft` split and the OOD splits `position`, `instruction`, `task`,
`object`, `distractor`, `physics`), never on its training scenes.

Writes `bench/results/sft.json` (or `--out`):

    {family: {split: {"n", "success", "ci95": [lo, hi]}},      # Wilson 95% intervals
     "train_samples_per_s": mean over families, "peak_rss_mb": this process and its children,
     "meta": {sizes, seconds per family and phase, machine}}

Usage:
    python bench/sft.py                       # 200 demos, 1500 steps (POLICY below), 50 scenes per split
    python bench/sft.py --fast                # a few minutes per family: 40 demos, 500 steps, 10 scenes per split
    python bench/sft.py --families pick_place --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from coda.config import build_config  # noqa: E402
from coda.scene.spec import FAMILIES  # noqa: E402
from coda.scene.splits import SPLITS, build_split  # noqa: E402
from coda.sim.tabletop.validity import sim_check

OUT = Path(__file__).parent / "results" / "sft.json"
TRAIN_SEED, EVAL_SEED = 0, 1
# The policy size the reported numbers are for: PolicyConfig's defaults, stated here so that a preset
# cannot silently change the benchmark.
POLICY = [
    "policy.hidden=64", "policy.layers=2", "policy.heads=4", "policy.batch_size=128", "policy.train_steps=1500",
    "policy.lr=0.001", "policy.chunk_len=8", "policy.n_action_steps=4", "policy.improvement=bc",
    "policy.train_critic=false",
]
FAST = ["scene.sft_scenes_per_family=40", "bench.eval_scenes_per_split=10", "policy.hidden=32", "policy.train_steps=500"]


def peak_rss_mb() -> float:
    """Peak resident memory of this process plus its largest child, in MB (Linux reports KB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + kids) / 1024.0


def run_family(family: str, cfg: Any, work: Path, workers: int, console: Console) -> tuple[dict[str, Any], dict[str, Any]]:
    """Demos -> SFT -> evaluation on every split for one family. Returns (results per split, timings)."""
    from coda.engine.rollout import evaluate_checkpoint
    from coda.policy.data import collect_demos
    from coda.policy.stats import success_summary
    from coda.policy.train import train_sft
    from coda.sim.backends import make_env
    from coda.sim.tabletop.experts import expert_for

    times: dict[str, Any] = {}
    t0 = time.perf_counter()
    train_scenes = build_split(family, "sft", cfg.scene.sft_scenes_per_family, TRAIN_SEED, workers=workers,
                               check=sim_check).valid
    demos = work / family / "demos"
    shutil.rmtree(demos, ignore_errors=True)
    env = make_env(cfg.sim)
    try:
        report = collect_demos(env, train_scenes, lambda s: expert_for(s, cfg.sim.expert_chunk), demos, progress=True)
    finally:
        env.close()
    times["demos_s"] = time.perf_counter() - t0
    times["demos"] = report.written
    console.print(f"{family}: {report.written} demos ({report.steps} steps) in {times['demos_s']:.0f} s")

    t0 = time.perf_counter()
    ckpt = work / family / "sft.pt"
    _, result = train_sft([demos], cfg.policy, ckpt, metrics_path=work / family / "train.jsonl", progress=True)
    times["train_s"] = time.perf_counter() - t0
    times["train_samples_per_s"] = result.samples_per_s
    times["final_bc_loss"] = result.metrics.get("bc")
    console.print(f"{family}: trained {result.steps} steps in {times['train_s']:.0f} s ({result.samples_per_s:.0f} samples/s)")

    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    for split in SPLITS:
        specs = build_split(family, split, cfg.bench.eval_scenes_per_split, EVAL_SEED, workers=workers,
                            check=sim_check).valid
        rollouts = evaluate_checkpoint(ckpt, specs, cfg.sim, workers=workers, record_states=False)
        out[split] = success_summary([r.success for r in rollouts])
        lo, hi = out[split]["ci95"]
        console.print(f"{family}/{split}: {out[split]['success']:.2f} [{lo:.2f}, {hi:.2f}] (n = {out[split]['n']})")
    times["eval_s"] = time.perf_counter() - t0
    return out, times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--fast", action="store_true", help="small sizes: a few minutes in all")
    ap.add_argument("--workers", type=int, default=1, help="processes for validity checks and rollouts")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override, e.g. policy.chunk_len=8")
    ap.add_argument("--work", type=Path, default=Path("runs/bench_sft"), help="demos and checkpoints go here")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    console = Console()
    cfg = build_config("full", overrides=POLICY + (FAST if args.fast else []) + args.overrides)
    import torch

    torch.set_num_threads(cfg.policy.torch_threads)
    results: dict[str, Any] = {}
    meta: dict[str, Any] = {
        "preset": "full" + (" --fast" if args.fast else ""), "overrides": args.overrides,
        "demos_per_family": cfg.scene.sft_scenes_per_family, "eval_scenes_per_split": cfg.bench.eval_scenes_per_split,
        "policy": cfg.policy.model_dump(mode="json"), "train_seed": TRAIN_SEED, "eval_seed": EVAL_SEED,
        "python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(), "families": {},
    }
    t_all = time.perf_counter()
    for family in args.families:
        results[family], meta["families"][family] = run_family(family, cfg, args.work, args.workers, console)
    meta["wall_s"] = time.perf_counter() - t_all
    rates = [meta["families"][f]["train_samples_per_s"] for f in args.families]
    results["train_samples_per_s"] = sum(rates) / len(rates)
    results["peak_rss_mb"] = peak_rss_mb()
    results["meta"] = meta
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")

    table = Table(title=f"SFT success ({meta['preset']})")
    table.add_column("family")
    for split in SPLITS:
        table.add_column(split)
    for family in args.families:
        table.add_row(family, *(f"{results[family][s]['success']:.2f}" for s in SPLITS))
    console.print(table)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
