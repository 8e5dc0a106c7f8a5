"""Headline: every strategy × seeds × the four families, R co-evolution rounds at equal budgets.

For each (seed, family) one `sft` run fits the SFT policy (round 0: the family's `sft` training scenes, expert
demos, behaviour cloning, evaluation on every split). Each closed-loop strategy (`coda`, `coda-sparse`,
`replay`, `accel`, `plr`, `dr`, `dagger`; `coda-sparse` only where the rounds' actor reads the chunk critic:
under behaviour cloning it is `coda`'s policy by construction, and `meta.not_run` says so) then starts from
that run's round 0 (`coda run --from-round0`), so all
of them fine-tune the *same* SFT policy, under the same generation budget, expert-label budget and training
steps, and are evaluated on the same scenes. Every run is a `coda run` subprocess with its own run directory,
memory and report; two run at a time (one per core, one rollout process and one torch thread each). A killed
benchmark started again with the same arguments skips finished runs and resumes unfinished ones;
`wall_seconds` sums the wall time of every invocation (`invocations/` in the work directory: each one's
time up to its last finished run, so a killed invocation counts until then), and `meta.run_seconds` gives
each run's subprocess seconds over its attempts.

Success is read from each run's memory: the policy after the last round on the evaluation splits (`sft` in
distribution; `position`, `instruction`, `task`, `object`, `distractor`, `physics` out of distribution), scenes
made with the run's seed, never trained on. OOD success pools every OOD episode of a strategy over seeds and
families; its 95% Wilson interval treats episodes as independent (the per-seed values are reported beside it).
Since every strategy of a seed plays the same evaluation scenes, each is also compared with `coda` scene by
scene: the paired difference, its bootstrap 95% interval and the exact McNemar p (`coda.policy.stats`).
Each run's memory also gives its seconds per phase (`phase_seconds`, summed over runs, rounds ≥ 1 for the
closed-loop strategies and round 0 for `sft`) and, for `coda` and `coda-sparse`, per round: probes, failed
probes, diagnoses, how many verified, and the share of the generation budget that went to failure-mode
programs.

Writes `bench/results/headline.json` (`--fast`: `headline_fast.json`), a markdown table and a figure
(`bench/headline_plot.py`) next to it:

    {"strategies": {name: {"ood_success", "ci95", "id_success", "per_family": {family: {split: rate}},
                           "ood_per_seed": [...], "n_ood": int, "n_id": int,
                           "phase_seconds": {phase: s},
                           "paired_vs_coda": {"diff", "ci95", "p", "n"},      # not for coda itself
                           "rounds": {run: [{"round", "probes", "failed_probes", "diagnoses", "verified",
                                             "mode_budget_share", "modes_programmed", "modes_uncompiled",
                                             "uncompiled_budget_share"}]}}},  # coda, coda-sparse
     "sft_to_coda_ratio", "coda_minus_best_closed_loop_pp", "best_closed_loop", "intervals_apart", "seeds",
     "rounds", "generation_budget_per_round", "labels_per_round", "eval_scenes_per_split", "probes_per_round",
     "diagnoses_per_round", "wall_seconds", "meta": {...}}

Usage:
    python bench/headline.py                  # 3 seeds, 84 runs (142 min measured on 2 cores, other work
                                              # sharing them; 148 for 96 runs with coda-sparse; a closed-loop
                                              # run 2-3 min with two at a time, a round-0 run 1.7-3.5)
    python bench/headline.py --fast           # 1 seed, the same sizes (32 min measured on 2 cores; 39 with
                                              # coda-sparse)
    python bench/headline.py --strategies coda dr --families pick_place --seeds 1
    python bench/headline.py --fast --report  # rewrite the results from finished runs, running nothing
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from coda.scene.spec import FAMILIES  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CLOSED_LOOP = ("coda", "coda-sparse", "replay", "accel", "plr", "dr", "dagger")
BASELINES = ("replay", "accel", "plr", "dr", "dagger")  # the closed-loop baselines coda is compared against
OOD_SPLITS = ("position", "instruction", "task", "object", "distractor", "physics")
# The sizes the reported numbers are for, on top of the `full` preset; stated here so a preset cannot silently
# change the benchmark. The SFT policy has bench/sft.py's sizes (200 scenes per family, 1500 steps): on push,
# seed 0, it reaches 0.67 in distribution with them and 0.53 with 100 scenes and 1000 steps.
SIZES = [
    "policy.hidden=64", "policy.layers=2", "policy.heads=4", "policy.batch_size=128", "policy.lr=0.001",
    "policy.train_steps=1500", "policy.finetune_steps=300", "policy.torch_threads=1",
    "scene.sft_scenes_per_family=200", "bench.eval_scenes_per_split=30",
    "engine.rounds=4", "engine.generation_budget=64", "engine.demo_budget=64", "engine.probe_scenes=32",
    "engine.max_diagnoses=12", "engine.mode_probes=4", "critic.counterfactual_k=4",
    "engine.measure_every_round=false", "engine.improvement=bc", "runtime.workers=1",
]


def critic_free(overrides: list[str]) -> bool:
    """Whether rounds run with these overrides fine-tune the actor without the chunk critic
    (`engine.improvement = "bc"` and no value-guided selection): `coda-sparse` then fine-tunes the very policy
    `coda` does, from the very data (Φ reaches only the critic, which nothing reads; `coda.engine.strategies`)."""
    from coda.config import build_config

    engine = build_config("full", overrides=overrides).engine
    return engine.improvement == "bc" and not engine.value_guided_samples


def default_strategies(overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """The closed-loop strategies a benchmark runs by default, and those it leaves out with the reason."""
    if critic_free(overrides):
        return [s for s in CLOSED_LOOP if s != "coda-sparse"], {
            "coda-sparse": "the same policy as coda by construction: with engine.improvement = bc and no "
                           "value-guided selection the actor never reads the chunk critic, the one part shaping "
                           "changes (bench/critic_value.py measures the critic itself); --strategies ... "
                           "coda-sparse runs it"}
    return list(CLOSED_LOOP), {}


@dataclass(frozen=True)
class Job:
    seed: int
    family: str
    strategy: str  # "sft" = the round-0 run the others start from

    @property
    def name(self) -> str:
        return f"s{self.seed}_{self.family}_{self.strategy}"


def run_dir(work: Path, job: Job) -> Path:
    return work / job.name


def run_status(path: Path) -> str:
    """'done', 'partial' (a run directory to resume) or 'new'."""
    if not (path / "config.yaml").is_file():
        return "new"
    from coda.engine.loop import resume_run

    ctx = resume_run(path)
    try:
        status = ctx.memory.get_run(ctx.run_id).status
    finally:
        ctx.close()
    return "done" if status == "done" else "partial"


def command(job: Job, work: Path, overrides: list[str]) -> list[str]:
    path = run_dir(work, job)
    cmd = [sys.executable, "-m", "coda", "run"]
    status = run_status(path)
    if status == "partial":
        return [*cmd, "--resume", str(path)]
    if path.exists():  # an empty or unreadable directory left by a kill before the config was written
        import shutil

        shutil.rmtree(path)
    cmd += ["--preset", "full", "--strategy", job.strategy, "--family", job.family, "--seed", str(job.seed),
            "--run-dir", str(path)]
    for o in overrides:
        cmd += ["--set", o]
    if job.strategy != "sft":
        cmd += ["--from-round0", str(run_dir(work, Job(job.seed, job.family, "sft")))]
    return cmd


def execute(job: Job, work: Path, overrides: list[str]) -> tuple[Job, float, int]:
    """Run one job as a subprocess (skipped when its run is done); its output goes to `<run>.log` and its
    seconds, summed over attempts, to `<run>.seconds`."""
    path = run_dir(work, job)
    if run_status(path) == "done":
        return job, 0.0, 0
    cmd = command(job, work, overrides)
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "120"}
    with open(work / f"{job.name}.log", "a") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    secs = time.perf_counter() - t0
    done = work / f"{job.name}.seconds"
    done.write_text(f"{run_seconds(work, job) + secs:.1f}\n")
    return job, secs, rc


def run_seconds(work: Path, job: Job) -> float:
    """Seconds the job's subprocesses ran, over every attempt recorded (0 when none is)."""
    f = work / f"{job.name}.seconds"
    return float(f.read_text()) if f.is_file() else 0.0


def read_run(path: Path, strategy: str) -> tuple[dict[str, dict[str, dict[str, bool]]], dict[str, Any]]:
    """A finished run's final outcomes and round evidence (`final_outcomes`, `run_evidence`), its memory
    opened once."""
    from coda.engine.loop import resume_run

    ctx = resume_run(path)
    try:
        return final_outcomes(ctx), run_evidence(ctx, strategy)
    finally:
        ctx.close()


def final_outcomes(ctx: Any) -> dict[str, dict[str, dict[str, bool]]]:
    """{family: {split: {scene spec_id: success}}} of the policy after a run's last round (phase "measure")."""
    spec_ids = {s.id: s.spec_id for s in ctx.memory.list("scenario", run_id=ctx.run_id)}
    eps = [e for e in ctx.memory.list("episode", run_id=ctx.run_id)
           if e.phase == "measure" and e.policy == "policy" and e.info.get("kind") == "eval"]
    last = max(e.round for e in eps)
    out: dict[str, dict[str, dict[str, bool]]] = {}
    for e in eps:
        if e.round == last:
            out.setdefault(e.info["family"], {}).setdefault(e.info["split"], {})[spec_ids[e.scenario_id]] = bool(e.success)
    return out


def run_evidence(ctx: Any, strategy: str) -> dict[str, Any]:
    """What a run's memory says about its rounds: seconds per phase (rounds 1.. for a closed-loop run, round 0
    for `sft`), and per round the probes that failed, the diagnoses and how many verified, and the share of
    the generation budget that went to failure-mode programs (`coda`, `coda-sparse`), and how many modes got
    a share but no program (it could not be compiled: their share explored instead) and that share."""
    from coda.reports.data import load_report_data

    seconds: dict[str, float] = {}
    for (r, phase), secs in ctx.memory.phase_seconds(ctx.run_id).items():
        if (r == 0) == (strategy == "sft"):
            seconds[phase] = seconds.get(phase, 0.0) + secs
    data = load_report_data(ctx.memory, ctx.run_id)
    rounds = []
    budget = int(data.config.get("engine", {}).get("generation_budget", 0)) or 1
    for r in data.rounds:
        if r == 0:
            continue
        outcomes = list(data.diagnosis_counts.get(r, {}).values())  # per critic mode: outcome -> count
        diagnosed = sum(sum(c.values()) for c in outcomes)
        verified = sum(c["verified"] for c in outcomes)
        to_modes = sum(p.count for p in data.programs if p.round == r and p.mode)
        probe = data.probe_success.get(r)
        uncompiled = [u for g in ctx.memory.list("generation_program", run_id=ctx.run_id, round_idx=r)
                      for u in (g.body.get("uncompiled") or [])]
        rounds.append({"round": r, "probes": probe.n if probe else 0,
                       "failed_probes": (probe.n - probe.k) if probe else 0,
                       "diagnoses": diagnosed, "verified": verified, "mode_budget_share": to_modes / budget,
                       "modes_programmed": len({p.mode for p in data.programs if p.round == r and p.mode}),
                       "modes_uncompiled": len(uncompiled),
                       "uncompiled_budget_share": sum(int(u["count"]) for u in uncompiled) / budget})
    return {"phase_seconds": seconds, "rounds": rounds}


def summarise(work: Path, jobs: list[Job], strategies: list[str]) -> dict[str, Any]:
    """The headline numbers from the finished runs' memories. Every strategy of a seed is evaluated on the same
    scenes (made in the shared round 0), so each is paired with `coda` scene by scene."""
    from coda.policy.stats import paired_difference, wilson_interval

    runs = {j: read_run(run_dir(work, j), j.strategy) for j in jobs if j.strategy in strategies}
    outcomes = {j: res for j, (res, _) in runs.items()}

    def ood_pairs(s: str) -> dict[tuple[int, str, str, str], bool]:
        return {(j.seed, fam, split, sid): ok for j, res in outcomes.items() if j.strategy == s
                for fam, splits in res.items() for split, xs in splits.items() if split in OOD_SPLITS
                for sid, ok in xs.items()}

    coda_ood = ood_pairs("coda") if "coda" in strategies else {}
    out: dict[str, Any] = {}
    for s in strategies:
        mine = [j for j in jobs if j.strategy == s]
        ood: list[bool] = []
        idd: list[bool] = []
        per_seed: dict[int, list[bool]] = {}
        per_family: dict[str, dict[str, list[bool]]] = {}
        for j in mine:
            for fam, splits in outcomes[j].items():
                for split, by_scene in splits.items():
                    xs = list(by_scene.values())
                    per_family.setdefault(fam, {}).setdefault(split, []).extend(xs)
                    if split in OOD_SPLITS:
                        ood += xs
                        per_seed.setdefault(j.seed, []).extend(xs)
                    elif split == "sft":
                        idd += xs
        lo, hi = wilson_interval(sum(ood), len(ood))
        evidence = [runs[j][1] for j in mine]
        seconds: dict[str, float] = {}
        for ev in evidence:
            for phase, secs in ev["phase_seconds"].items():
                seconds[phase] = seconds.get(phase, 0.0) + secs
        out[s] = {"ood_success": sum(ood) / len(ood), "ci95": [lo, hi], "n_ood": len(ood),
                  "id_success": sum(idd) / len(idd), "n_id": len(idd),
                  "ood_per_seed": [sum(v) / len(v) for _, v in sorted(per_seed.items())],
                  "per_family": {f: {sp: sum(v) / len(v) for sp, v in sorted(d.items())}
                                 for f, d in sorted(per_family.items())},
                  "phase_seconds": {k: round(v, 1) for k, v in sorted(seconds.items())}}
        if s in ("coda", "coda-sparse"):
            out[s]["rounds"] = {j.name: ev["rounds"] for j, ev in zip(mine, evidence)}
        if coda_ood and s != "coda":
            mine_ood = ood_pairs(s)
            keys = sorted(k for k in mine_ood if k in coda_ood)
            out[s]["paired_vs_coda"] = paired_difference([mine_ood[k] for k in keys], [coda_ood[k] for k in keys],
                                                         seed=0)
    return out


def sizes(overrides: list[str]) -> dict[str, int | None]:
    """The experiment's sizes as the runs used them (the last override of a field wins, as in `coda run`)."""
    fields = {"engine.rounds": "rounds", "engine.generation_budget": "generation_budget_per_round",
              "engine.demo_budget": "labels_per_round", "bench.eval_scenes_per_split": "eval_scenes_per_split",
              "engine.probe_scenes": "probes_per_round", "engine.max_diagnoses": "diagnoses_per_round"}
    out: dict[str, int | None] = dict.fromkeys(fields.values())
    for o in overrides:
        key, _, val = o.partition("=")
        if key in fields:
            out[fields[key]] = int(val)
    return out


def markdown(result: dict[str, Any], cmd: str) -> str:
    st = result["strategies"]
    lines = [f"Command: `{cmd}`; {result['seeds']} seed(s), {result['rounds']} round(s), "
             f"{result['generation_budget_per_round']} generated scenes and {result['labels_per_round']} expert "
             f"labels per round, {result['eval_scenes_per_split']} evaluation scenes per split, "
             f"wall {result['wall_seconds'] / 60:.0f} min.", "",
             "| strategy | OOD success | 95% CI | − coda, paired (95% CI), McNemar p | in-distribution | "
             + " | ".join(OOD_SPLITS) + " |",
             "|---|---|---|---|---|" + "---|" * len(OOD_SPLITS)]
    for name, r in st.items():
        fams = r["per_family"]
        split_means = [sum(fams[f].get(sp, 0.0) for f in fams) / max(1, len(fams)) for sp in OOD_SPLITS]
        pv = r.get("paired_vs_coda")
        paired = (f"{100 * pv['diff']:+.1f} [{100 * pv['ci95'][0]:+.1f}, {100 * pv['ci95'][1]:+.1f}], p={pv['p']:.2g}"
                  if pv else "–")
        lines.append(f"| {name} | {r['ood_success']:.3f} | [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] | {paired} | "
                     f"{r['id_success']:.3f} | " + " | ".join(f"{x:.2f}" for x in split_means) + " |")
    lines += ["", f"- SFT → coda OOD ratio: {result['sft_to_coda_ratio']}"]
    if result["best_closed_loop"]:
        lines.append(f"- coda − best closed-loop baseline ({result['best_closed_loop']}): "
                     f"{result['coda_minus_best_closed_loop_pp']} points")
    lines.append("- paired column: the strategy's OOD success minus coda's on the same scenes, in points")
    for name in ("coda", "coda-sparse"):
        rounds = [x for runs in st.get(name, {}).get("rounds", {}).values() for x in runs]
        if rounds:
            diag = sum(x["diagnoses"] for x in rounds)
            ver = sum(x["verified"] for x in rounds)
            share = sum(x["mode_budget_share"] for x in rounds) / len(rounds)
            lines.append(f"- {name}: {ver} of {diag} diagnoses verified over {len(rounds)} rounds; "
                         f"{100 * share:.0f}% of the generation budget went to failure-mode programs")
    for name, why in result.get("meta", {}).get("not_run", {}).items():
        lines.append(f"- {name} not run: {why}")
    lines += ["", "Per family (success per split; in distribution first):", ""]
    fams = sorted({f for r in st.values() for f in r["per_family"]})
    for fam in fams:
        lines += [f"**{fam}**", "", "| strategy | sft | " + " | ".join(OOD_SPLITS) + " |",
                  "|---|---|" + "---|" * len(OOD_SPLITS)]
        for name, r in st.items():
            row = r["per_family"].get(fam, {})
            lines.append(f"| {name} | " + " | ".join(f"{row.get(sp, float('nan')):.2f}" for sp in ("sft", *OOD_SPLITS))
                         + " |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _commit() -> str | None:
    """The source tree's git commit (with '+dirty' when it has uncommitted changes), if it is a checkout."""
    src = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="1 seed instead of 3")
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 3, --fast 1)")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--strategies", nargs="+", default=None, choices=list(CLOSED_LOOP),
                    help="closed-loop strategies (default: all of them, coda-sparse only where the actor reads "
                         "the chunk critic)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (one per core)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override for every run")
    ap.add_argument("--work", type=Path, default=None, help="run directories (default runs/bench_headline[_fast])")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", action="store_true",
                    help="only summarise: write the results of the finished runs, run nothing (all must be done)")
    args = ap.parse_args()

    console = Console()
    seeds = args.seeds or (1 if args.fast else 3)
    overrides = SIZES + args.overrides
    chosen, left_out = (args.strategies, {}) if args.strategies else default_strategies(overrides)
    work = (args.work or Path("runs") / ("bench_headline_fast" if args.fast else "bench_headline")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / ("headline_fast.json" if args.fast else "headline.json")
    strategies = ["sft", *chosen]
    round0 = [Job(s, f, "sft") for s in range(seeds) for f in args.families]
    later = {(j.seed, j.family): [Job(j.seed, j.family, s) for s in chosen] for j in round0}
    jobs = round0 + [j for js in later.values() for j in js]

    if args.report:
        missing = [j.name for j in jobs if run_status(run_dir(work, j)) != "done"]
        if missing:
            raise SystemExit(f"--report: {len(missing)} run(s) are not done in {work}: {', '.join(missing)}")
    t0 = time.perf_counter()
    record = None if args.report else work / "invocations" / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"

    def note_wall(finished: bool) -> None:
        """This invocation's wall time so far (after each finished run, and at its end), so a killed benchmark
        keeps the time it spent up to its last finished run."""
        if record is not None:
            record.parent.mkdir(exist_ok=True)
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps({"argv": sys.argv[1:], "wall_seconds": time.perf_counter() - t0,
                                       "finished": finished, "commit": _commit()}) + "\n")
            tmp.replace(record)

    failed: list[str] = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar, ThreadPoolExecutor(args.jobs) as pool:
        task = bar.add_task("headline runs", total=len(jobs))
        running: set[Future[tuple[Job, float, int]]] = (
            set() if args.report else {pool.submit(execute, j, work, overrides) for j in round0})
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                job, secs, rc = fut.result()
                bar.advance(task)
                if rc != 0:
                    failed.append(job.name)
                    console.print(f"[red]{job.name} failed (exit {rc}); see {work / (job.name + '.log')}[/]")
                    if job.strategy == "sft":
                        bar.advance(task, len(later[(job.seed, job.family)]))
                    continue
                console.print(f"{job.name}: {secs / 60:.1f} min")
                note_wall(False)
                if job.strategy == "sft":
                    running |= {pool.submit(execute, j, work, overrides) for j in later[(job.seed, job.family)]}
    if failed:
        console.print(f"[red]{len(failed)} run(s) failed: {', '.join(failed)}[/]")
        raise SystemExit(1)
    note_wall(True)
    invocations = read_invocations(work)  # a resumed benchmark's wall time is the sum

    st = summarise(work, jobs, strategies)
    ran = [s for s in BASELINES if s in st]  # the best of the baselines that ran (all of them by default)
    best = max(ran, key=lambda s: st[s]["ood_success"]) if ran else None
    coda = st.get("coda")
    result = {
        "strategies": st,
        "sft_to_coda_ratio": (round(coda["ood_success"] / st["sft"]["ood_success"], 2)
                              if coda and st["sft"]["ood_success"] > 0 else None),
        "coda_minus_best_closed_loop_pp": (round(100 * (coda["ood_success"] - st[best]["ood_success"]), 1)
                                           if coda and best else None),
        "best_closed_loop": best,
        "intervals_apart": (coda["ci95"][0] > st[best]["ci95"][1]) if coda and best else None,
        "seeds": seeds, **sizes(overrides),
        "wall_seconds": sum(i["wall_seconds"] for i in invocations),
        "meta": {"families": args.families, "overrides": overrides, "jobs": args.jobs, "invocations": invocations,
                 "not_run": left_out,
                 "run_seconds": {j.name: run_seconds(work, j) for j in jobs},
                 "commit": _commit(),
                 "python": platform.python_version(), "cpus": os.cpu_count(), "work": str(work)},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    cmd = "python bench/headline.py" + (" --fast" if args.fast else "") + "".join(
        f" {a}" for a in sys.argv[1:] if a not in ("--fast", "--report"))
    md = markdown(result, cmd.replace(" --fast --fast", " --fast"))
    out.with_suffix(".md").write_text(md)
    from headline_plot import draw  # this folder's figure of the same result

    draw(result, out.with_suffix(".png"))

    table = Table(title="headline: success after the last round")
    for col in ("strategy", "OOD", "95% CI", "in-dist", "OOD per seed"):
        table.add_column(col)
    for name, r in st.items():
        table.add_row(name, f"{r['ood_success']:.3f}", f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]",
                      f"{r['id_success']:.3f}", ", ".join(f"{x:.2f}" for x in r["ood_per_seed"]))
    console.print(table)
    console.print(f"SFT→coda ratio {result['sft_to_coda_ratio']}; coda − {best}: "
                  f"{result['coda_minus_best_closed_loop_pp']} points; wall {result['wall_seconds'] / 60:.1f} min "
                  f"over {len(invocations)} invocation(s) → {out}")


def read_invocations(work: Path) -> list[dict[str, Any]]:
    """Every invocation's record in `work`, oldest first: `invocations/*.json` (wall time up to its last
    finished run, `finished` when it ran to the end) and the lines of an older `invocations.jsonl`."""
    legacy = work / "invocations.jsonl"
    out = [json.loads(line) for line in legacy.read_text().splitlines() if line] if legacy.exists() else []
    return out + [json.loads(p.read_text()) for p in sorted((work / "invocations").glob("*.json"))]


if __name__ == "__main__":
    main()
