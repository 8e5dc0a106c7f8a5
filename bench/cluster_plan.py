"""How far does a round scale out? A round's wall time on N workers, predicted from what a finished run measured.

A finished run's memory holds, per round and phase, the seconds from the phase's start to its commit
(`Memory.phase_seconds`), and the train phase's training steps and samples per second (its checkpoint and
training program). A phase's time splits into

- **driver** work, which stays in the one process that writes the memory however many workers there are:
  the critic's diagnoses (`diagnose`), compiling verified diagnoses into programs (`compile`), and the
  policy's training inside the train phase (steps x batch / samples per second);
- **parallel** work, which runs on the executor's workers (`runtime.workers` local processes or Ray actors):
  everything else — policy rollouts (`evaluate`, `measure`, learning-progress probes), validity checks of
  generated scenes (`generate`), the verifier's counterfactual episodes (`verify`), and the train phase's
  expert demos, corrective relabels and replays.

The run's parallel seconds times its workers' measured speed-up (`--speedup`: two workers against one in
`bench/results/rollout_speed.json`, since the run used two) are the parallel CPU seconds; on N workers a round then
takes `driver + parallel_cpu / N` (perfect spreading, no dispatch cost: a lower bound; Ray's dispatch
measured 0.94x the local pool's wall time on this machine, `rollout_speed.json` `ray_vs_local`). As N grows
the round tends to its driver time: that is where the driver becomes the bottleneck.

Writes `bench/results/cluster_plan.json`:

    {"run": str, "workers": int, "speedup_used": float, "rounds": [int],
     "per_round": {"driver_s": float, "parallel_s": float, "parallel_cpu_s": float,
                   "phases": {phase: {"seconds": float, "driver_s": float}}},
     "predicted_round_s": {N: float}, "driver_share_at": {N: float}, "n_half_driver": int}

Usage:
    python bench/cluster_plan.py RUN_DIR        # e.g. the run `make demo` wrote (`runs/<id>`)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).parent / "results" / "cluster_plan.json"
DRIVER_PHASES = ("diagnose", "compile")  # work that only the driver process does
WORKERS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def round_costs(run_dir: Path) -> dict[str, Any]:
    """Per round ≥ 1 of the run in `run_dir`: its phases' seconds and how much of each is driver work."""
    from coda.memory import open_memory_from_config
    from coda.config import CodaConfig

    cfg = CodaConfig.model_validate(yaml.safe_load((run_dir / "config.yaml").read_text()))
    mem = open_memory_from_config(run_dir, cfg.memory, readonly=True)
    try:
        run_id = run_dir.name
        seconds = mem.phase_seconds(run_id)
        programs = {p.key: p.body for p in mem.list("training_program", run_id=run_id)}
        ckpts = {c.path: c.metrics for c in mem.list("checkpoint", run_id=run_id)}
    finally:
        mem.close()
    rounds: dict[int, dict[str, Any]] = {}
    for (r, phase), s in sorted(seconds.items()):
        if r < 1:
            continue  # round 0 (SFT) runs once per run, not per round
        driver = s if phase in DRIVER_PHASES else 0.0
        if phase == "train":
            body = programs.get(f"round_{r}", {})
            metrics = ckpts.get(f"checkpoints/round_{r:03d}.pt", {})
            if body.get("steps") and metrics.get("samples_per_s"):
                driver = min(s, body["steps"] * cfg.policy.batch_size / metrics["samples_per_s"])
        rounds.setdefault(r, {})[phase] = {"seconds": round(s, 2), "driver_s": round(driver, 2)}
    return {"workers": cfg.runtime.workers, "rounds": rounds}


def predict(costs: dict[str, Any], speedup: float) -> dict[str, Any]:
    """The mean round's driver and parallel seconds, and its predicted wall time on each of `WORKERS`."""
    rounds = costs["rounds"]
    if not rounds:
        raise SystemExit("the run has no committed round after round 0: run at least one round")
    phases: dict[str, dict[str, float]] = {}
    for per in rounds.values():
        for phase, v in per.items():
            p = phases.setdefault(phase, {"seconds": 0.0, "driver_s": 0.0})
            p["seconds"] += v["seconds"] / len(rounds)
            p["driver_s"] += v["driver_s"] / len(rounds)
    driver = sum(p["driver_s"] for p in phases.values())
    parallel = sum(p["seconds"] - p["driver_s"] for p in phases.values())
    cpu = parallel * (speedup if costs["workers"] > 1 else 1.0)
    predicted = {n: driver + cpu / n for n in WORKERS}
    half = next((n for n in range(1, 100_000) if cpu / n <= driver), None)
    return {"per_round": {"driver_s": round(driver, 1), "parallel_s": round(parallel, 1),
                          "parallel_cpu_s": round(cpu, 1),
                          "phases": {k: {kk: round(vv, 1) for kk, vv in v.items()} for k, v in sorted(phases.items())}},
            "predicted_round_s": {str(n): round(t, 1) for n, t in predicted.items()},
            "driver_share_at": {str(n): round(driver / t, 2) for n, t in predicted.items()},
            "n_half_driver": half}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished run directory (one with rounds after round 0)")
    ap.add_argument("--speedup", type=float, default=None,
                    help="the run's parallel speed-up over one worker (default: two_workers_speedup of "
                         "bench/results/rollout_speed.json when the run used two workers)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    costs = round_costs(args.run)
    speedup = args.speedup
    if speedup is None:
        speed = json.loads((Path(__file__).parent / "results" / "rollout_speed.json").read_text())
        speedup = float(speed["two_workers_speedup"]) if costs["workers"] == 2 else float(costs["workers"])
    out = {"run": str(args.run), "workers": costs["workers"], "speedup_used": speedup,
           "rounds": sorted(costs["rounds"]), **predict(costs, speedup)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    pr = out["per_round"]
    print(f"{args.run}: {len(out['rounds'])} rounds on {out['workers']} workers; per round {pr['driver_s']} s in the "
          f"driver, {pr['parallel_s']} s parallel ({pr['parallel_cpu_s']} CPU s)")
    for phase, v in pr["phases"].items():
        print(f"  {phase:10s} {v['seconds']:7.1f} s  (driver {v['driver_s']:.1f} s)")
    print("workers  round s  driver share")
    for n in WORKERS:
        print(f"{n:7d}  {out['predicted_round_s'][str(n)]:7.1f}  {out['driver_share_at'][str(n)]:.2f}")
    print(f"the driver is half of a round from {out['n_half_driver']} workers on; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
