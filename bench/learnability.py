"""Can the learner use targeted data? One round's training step with matched demos, against the same step
with more SFT-like demos, per family.

For each family (seeds: training scenes 0, matched and extra scenes 2 and 3, evaluation 1, never shared):

- `sft`: the SFT policy, behaviour cloning of N expert demos of the family's `sft` split;
- `matched`: from the SFT policy, one round's training step (`coda.engine.training.finetune`, the function
  the engine's train phase calls, with the engine's data weights) on the SFT demos plus 32 expert demos in
  scenes of the `task` split and 32 of the `position` split;
- `sft_only`: the same step with 64 more demos of the `sft` split instead;
- `corrective`: the same step with the same 64 labels spent as the engine's corrective data: expert demos
  in half of the matched scenes, and the SFT policy's own failed episodes in the other half relabelled by
  the expert from where Φ of the scene's stage plan last rose (`coda.engine.compile.corrective_start`).

Each policy is rolled out on E valid scenes of every split, under the success rule of the simulator
(`SimConfig.success_hold_steps`: the goal holds at the end). Ablations rerun the `sft` and `matched`
policies with one part of the learner changed (`ABLATIONS`). With several `--train-seeds` (`policy.seed`:
initial weights and batches; the demos and scenes stay the same) every policy is trained once per seed and
its results pool the seeds' episodes: one training run is not a baseline, its spread across seeds is as
large as most effects measured here.

Writes `bench/results/learnability.json` (and the same as tables in `learnability.md` beside it):

    {family: {"sft" | "matched" | "sft_only" | "corrective": {split: {"success", "n", "ci95", "per_seed"}},
              "paired_vs_sft": {policy: {split: {"diff", "ci95", "p", "n"}}}, "seconds": [...]},
     "ablations": {name: {family: {policy: {split: float}}}}, "success_rule": str, "meta": {...}}

`paired_vs_sft` compares each policy with the SFT policy of the same training seed on the same scenes
(paired bootstrap interval and exact McNemar p over seeds x scenes).

Usage:
    python bench/learnability.py                         # 200 SFT demos, 50 scenes per split, all ablations
    python bench/learnability.py --fast                  # 40 SFT demos, 10 scenes per split, no ablations
    python bench/learnability.py --families stack --ablations none
    python bench/learnability.py --ablations gripper_frame awr --ablation-families pick_place push
    python bench/learnability.py --families push --ablations none --policies sft sft_only --set engine.retrain=true
    python bench/learnability.py --families push --ablations none --train-seeds 0 1 2
Demos, checkpoints and rollouts are kept under --work: a stopped run continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
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

from _common import scenes  # noqa: E402
from coda.config import build_config  # noqa: E402
from coda.scene.spec import FAMILIES  # noqa: E402
from coda.scene.splits import SPLITS  # noqa: E402

OUT = Path(__file__).parent / "results" / "learnability.json"
TRAIN_SEED, EVAL_SEED, MATCHED_SEED, EXTRA_SEED = 0, 1, 2, 3
MATCHED = {"task": 32, "position": 32}
POLICY = [
    "policy.hidden=64", "policy.layers=2", "policy.heads=4", "policy.batch_size=128", "policy.train_steps=1500",
    "policy.finetune_steps=1500", "policy.lr=0.001", "policy.chunk_len=8", "policy.n_action_steps=4",
]
FAST = ["scene.sft_scenes_per_family=40", "bench.eval_scenes_per_split=10", "policy.train_steps=500"]
# name -> config overrides that switch one part of the learner back to the first build's
ABLATIONS: dict[str, list[str]] = {
    "sentence_grounding": ["policy.grounding=sentence", "policy.frame=gripper"],  # item 1: the first build's grounding and frame
    "gripper_frame": ["policy.frame=gripper"],  # item 1: chunks along the world's axes from the gripper, not the goal's frame
    "no_grounding_labels": ["policy.grounding_weight=0.0"],  # item 1: pointers learned from BC alone
    "no_unfamiliar": ["policy.unfamiliar_rate=0.0"],  # item 1: no training on instructions with unfamiliar words
    "read_motion": ["policy.read_motion=true"],  # the policy reads its own velocity and last grip command
    "awr": ["engine.improvement=awr"],  # item 2: the critic's advantage weights instead of plain behaviour cloning
    "sampled_prior": ["engine.layout_prior=sampled"],  # item 1: the pointers' layout prior learns the batches as oversampled, not the data as collected
    "short_finetune": ["policy.finetune_steps=500"],  # item 2: the first build's round length
}
POLICIES = ("sft", "matched", "sft_only", "corrective")


def demos(work: Path, family: str, name: str, specs: list[Any], cfg: Any) -> Path:
    """Expert demos in `specs` (as the engine collects them) under work/family/demos_<name>."""
    from coda.engine.backend import RoundBackend

    out = work / family / f"demos_{name}"
    if (out / "index.json").exists():
        return out
    tmp = out.with_name(out.name + ".partial")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    with RoundBackend(cfg) as backend:
        backend.collect_demos(specs, tmp)
    tmp.rename(out)
    return out


def evaluate(ckpt: Path, eval_scenes: dict[str, list[Any]], cfg: Any, workers: int, cache: Path) -> dict[str, Any]:
    """Success per split (Wilson intervals) and each scene's outcome (`outcomes`, in scene order, for paired
    tests), cached next to the checkpoint."""
    from coda.engine.rollout import evaluate_checkpoint
    from coda.policy.stats import success_summary

    if cache.exists():
        cached = json.loads(cache.read_text())
        if all("outcomes" in cached[s] for s in SPLITS):
            return cached
    flat = [(split, s) for split in SPLITS for s in eval_scenes[split]]
    rollouts = evaluate_checkpoint(ckpt, [s for _, s in flat], cfg.sim, workers=workers, record_states=False,
                                   overrides={k: getattr(cfg.policy, k) for k in INFERENCE_FIELDS})
    out = {}
    for split in SPLITS:
        wins = [bool(r.success) for (sp, _), r in zip(flat, rollouts) if sp == split]
        out[split] = {**success_summary(wins), "outcomes": wins}
    cache.write_text(json.dumps(out, indent=1))
    return out


def pooled(per_seed: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any]:
    """One family's results over training seeds: per policy and split the success over every seed's scenes
    (Wilson interval, `per_seed` rates), and `paired`: each policy against `sft` of the same seed on the same
    scenes (paired bootstrap interval and McNemar p over seeds x scenes)."""
    from coda.policy.stats import paired_difference, success_summary

    out: dict[str, Any] = {}
    for name in names:
        out[name] = {}
        for split in SPLITS:
            wins = [w for r in per_seed for w in r[name][split]["outcomes"]]
            out[name][split] = {**success_summary(wins), "per_seed": [r[name][split]["success"] for r in per_seed]}
    if "sft" in names:
        out["paired_vs_sft"] = {
            name: {split: paired_difference([w for r in per_seed for w in r[name][split]["outcomes"]],
                                            [w for r in per_seed for w in r["sft"][split]["outcomes"]])
                   for split in SPLITS}
            for name in names if name != "sft"
        }
    out["seconds"] = [r["seconds"] for r in per_seed]
    return out


def corrective_demos(sft: Path, matched: list[Any], cfg: Any, out: Path) -> list[Path]:
    """The `corrective` data: expert demos in every other matched scene, and in the others the SFT policy's
    failed episodes relabelled by the expert from their failure state (successes there stay unlabelled)."""
    from coda.engine.backend import EpisodeJob, RoundBackend
    from coda.engine.compile import corrective_start
    from coda.engine.round import replay_states
    from coda.engine.rollout import evaluate_checkpoint
    from coda.policy.data import DemoWriter
    from coda.shaping.text2potential import canonical_plan, compile_plan

    if (out / "index.json").exists():
        return [out]
    backend = RoundBackend(cfg)
    demo_scenes, probe_scenes = matched[0::2], matched[1::2]
    rollouts = evaluate_checkpoint(sft, probe_scenes, cfg.sim, workers=1, record_states=False)
    env = backend.make_env()
    jobs = [EpisodeJob("expert", s) for s in demo_scenes]
    try:
        for spec, ro in zip(probe_scenes, rollouts):
            if ro.success:
                continue
            phi = compile_plan(canonical_plan(spec), spec).phis(replay_states(env, spec, ro.actions))
            jobs.append(EpisodeJob("corrective", spec, None, ro.actions, corrective_start(list(phi)),
                                   label_every=cfg.policy.n_action_steps, label_len=cfg.policy.chunk_len))
    finally:
        env.close()
    tmp = out.with_name(out.name + ".partial")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    with DemoWriter(tmp) as writer:
        for ep in backend.round_episodes(jobs):
            if ep is not None:
                writer.add(ep)
    backend.close()
    tmp.rename(out)
    return [out]


# Policy fields that change only how a trained policy acts, never its training: left out of the checkpoint
# directories' digests (changing one re-evaluates, it does not retrain) and named in the evaluation caches.
INFERENCE_FIELDS = ("ground_once",)


def _hash(data: Any, n: int) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:n]


def _inference_tag(cfg: Any) -> str:
    return _hash({k: getattr(cfg.policy, k) for k in INFERENCE_FIELDS}, 8)


def _digest(cfg: Any, sections: tuple[str, ...] | None = None) -> str:
    data = cfg.model_dump(mode="json")
    for k in INFERENCE_FIELDS:
        data["policy"].pop(k, None)
    if sections is not None:
        data = {k: data[k] for k in sections}
        data.get("policy", {}).pop("finetune_steps", None)  # used by the round's step only
    return _hash(data, 10)


def run_family(family: str, cfg: Any, tag: str, work: Path, workers: int, console: Console,
               policies: tuple[str, ...] = POLICIES) -> dict[str, Any]:
    """The `policies` (default all: SFT, matched, sft_only, corrective) of one family under one learner
    configuration (`tag`), trained with the training seed `cfg.policy.seed` (weights and batches)."""
    from coda.engine.training import finetune
    from coda.policy.train import train_sft

    import torch

    n_sft, n_eval = cfg.scene.sft_scenes_per_family, cfg.bench.eval_scenes_per_split
    train = scenes(work, family, "sft", n_sft, TRAIN_SEED, workers)
    matched = [s for split, n in MATCHED.items() for s in scenes(work, family, split, n, MATCHED_SEED, workers)]
    extra = scenes(work, family, "sft", sum(MATCHED.values()), EXTRA_SEED, workers)
    evals = {split: scenes(work, family, split, n_eval, EVAL_SEED, workers) for split in SPLITS}
    d_sft = demos(work, family, f"sft{n_sft}", train, cfg)
    d_matched = demos(work, family, "matched", matched, cfg)
    d_extra = demos(work, family, "sft_extra", extra, cfg)
    # the SFT policy depends on the policy, scene and simulator settings; a round's step on everything
    sft_root = work / family / f"sft-{_digest(cfg, ('policy', 'scene', 'sim'))}"
    root = sft_root / f"{tag}-{_digest(cfg)}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=1, sort_keys=True))
    times: dict[str, float] = {}
    sft = sft_root / "sft.pt"
    if not sft.exists():
        t0 = time.perf_counter()
        torch.manual_seed(cfg.policy.seed)
        train_sft([d_sft], cfg.policy, sft, progress=True)
        times["sft_train_s"] = time.perf_counter() - t0
    out: dict[str, Any] = {}
    steps = {"matched": lambda: [d_matched], "sft_only": lambda: [d_extra],
             "corrective": lambda: corrective_demos(sft, matched, cfg, root / "demos_corrective")}
    for name, new_data in steps.items():
        ckpt = root / f"{name}.pt"
        if name in policies and not ckpt.exists():
            new = new_data()
            t0 = time.perf_counter()
            torch.manual_seed(cfg.policy.seed)
            finetune(sft, [d_sft], new, cfg, ckpt)
            times[f"{name}_train_s"] = time.perf_counter() - t0
    for name in policies:
        t0 = time.perf_counter()
        where = sft_root if name == "sft" else root
        out[name] = evaluate(where / f"{name}.pt", evals, cfg, workers, where / f"{name}.eval-{_inference_tag(cfg)}.json")
        times[f"{name}_eval_s"] = time.perf_counter() - t0
        row = "  ".join(f"{s} {out[name][s]['success']:.2f}" for s in SPLITS)
        console.print(f"[{tag}, training seed {cfg.policy.seed}] {family}/{name}: {row}")
    out["seconds"] = times
    return out


def markdown(results: dict[str, Any], families: list[str], names: tuple[str, ...], command: str) -> str:
    """The results as markdown: per family, each policy's success per split pooled over the training seeds
    (95% Wilson interval), each policy's paired difference to SFT, and the ablations."""
    meta = results["meta"]
    lines = [f"# Can the learner use targeted data? ({len(meta['training_seeds'])} training seeds)", "",
             f"Command: `{command}`", "",
             f"{meta['sft_demos']} SFT demos, {meta['eval_scenes_per_split']} evaluation scenes per split and training "
             f"seed (seeds {meta['training_seeds']}); success rule: {results['success_rule']}.", ""]
    head = "| {} | " + " | ".join(SPLITS) + " |"
    rule = "|---" * (len(SPLITS) + 1) + "|"
    for family in families:
        r = results[family]
        lines += [f"## {family}", "", head.format("success [95% CI]"), rule]
        for name in names:
            cells = [f"{r[name][s]['success']:.2f} [{r[name][s]['ci95'][0]:.2f}, {r[name][s]['ci95'][1]:.2f}]" for s in SPLITS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if r.get("paired_vs_sft"):
            lines += ["", head.format("− sft, paired (p)"), rule]
            for name, d in r["paired_vs_sft"].items():
                cells = [f"{d[s]['diff']:+.2f} [{d[s]['ci95'][0]:+.2f}, {d[s]['ci95'][1]:+.2f}] ({d[s]['p']:.2g})" for s in SPLITS]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "per training seed: " + "; ".join(
            f"{name} " + ", ".join(f"{s} {'/'.join(f'{x:.2f}' for x in r[name][s]['per_seed'])}" for s in SPLITS)
            for name in names), ""]
    for a, per_family in results["ablations"].items():
        lines += [f"## ablation `{a}` ({' '.join(ABLATIONS[a])}; training seeds {meta['ablation_seeds']})", "",
                  head.format("success"), rule]
        for family, per_name in per_family.items():
            for name, row in per_name.items():
                lines.append(f"| {family} {name} | " + " | ".join(f"{row[s]:.2f}" for s in SPLITS) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--fast", action="store_true", help="small sizes, no ablations")
    ap.add_argument("--ablations", nargs="*", default=None, help=f"subset of {list(ABLATIONS)} (default all; none with --fast)")
    ap.add_argument("--ablation-families", nargs="+", default=None, choices=list(FAMILIES),
                    help="families the ablations run on (default: --families)")
    ap.add_argument("--workers", type=int, default=2, help="processes for validity checks and rollouts")
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES,
                    help="the policies trained and evaluated (default all)")
    ap.add_argument("--train-seeds", nargs="+", type=int, default=[0],
                    help="training seeds (policy.seed: initial weights and batches); results pool their scenes")
    ap.add_argument("--ablation-seeds", nargs="+", type=int, default=None,
                    help="training seeds of the ablations (default: the first of --train-seeds)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    ap.add_argument("--work", type=Path, default=Path("runs/bench_learnability"))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    console = Console()
    base = POLICY + (FAST if args.fast else []) + args.overrides
    ablations = ([] if args.fast else list(ABLATIONS)) if args.ablations is None else [a for a in args.ablations if a != "none"]
    for a in ablations:
        if a not in ABLATIONS:
            ap.error(f"unknown ablation '{a}'. Available: {list(ABLATIONS)}")
    import torch

    def seeded(extra: list[str], seed: int) -> Any:
        return build_config("full", overrides=base + extra + [f"policy.seed={seed}"])

    cfg = build_config("full", overrides=base)
    torch.set_num_threads(cfg.policy.torch_threads)
    t_all = time.perf_counter()
    results: dict[str, Any] = {"ablations": {}}
    names = tuple(args.policies)
    for family in args.families:
        runs = [run_family(family, seeded([], s), "main", args.work, args.workers, console, policies=names)
                for s in args.train_seeds]
        results[family] = pooled(runs, names)
    for a in ablations:
        results["ablations"][a] = {}
        for family in args.ablation_families or args.families:
            runs = [run_family(family, seeded(ABLATIONS[a], s), a, args.work, args.workers, console,
                               policies=("sft", "matched")) for s in (args.ablation_seeds or args.train_seeds[:1])]
            r = pooled(runs, ("sft", "matched"))
            results["ablations"][a][family] = {name: {s: r[name][s]["success"] for s in SPLITS} for name in ("sft", "matched")}
    results["success_rule"] = (f"the goal holds at the end of the episode: it ends solved once the goal has held for "
                               f"{cfg.sim.success_hold_steps} control steps with the gripper off the goal's entities, "
                               f"or it holds at the time limit ({cfg.sim.max_steps} steps)")
    results["meta"] = {"overrides": base, "sft_demos": cfg.scene.sft_scenes_per_family, "matched": MATCHED,
                       "eval_scenes_per_split": cfg.bench.eval_scenes_per_split, "finetune_steps": cfg.policy.finetune_steps,
                       "seeds": {"train": TRAIN_SEED, "eval": EVAL_SEED, "matched": MATCHED_SEED, "extra": EXTRA_SEED},
                       "training_seeds": args.train_seeds, "ablation_seeds": args.ablation_seeds or args.train_seeds[:1],
                       "engine": {k: v for k, v in cfg.engine.model_dump(mode="json").items()
                                  if k in ("improvement", "replay_weight", "expert_weight")},
                       "wall_s_this_invocation": time.perf_counter() - t_all, "cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    command = "python bench/learnability.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.with_suffix(".md").write_text(markdown(results, args.families, names, command))
    for name in args.policies:
        table = Table(title=f"{name} (success)")
        table.add_column("family")
        for split in SPLITS:
            table.add_column(split)
        for family in args.families:
            table.add_row(family, *(f"{results[family][name][s]['success']:.2f}" for s in SPLITS))
        console.print(table)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
