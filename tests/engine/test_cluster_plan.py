"""The cluster plan (`bench/cluster_plan.py`): a finished run's rounds split into driver work (diagnoses,
compiling, training) and work on the workers, and the round's predicted wall time on N workers falls towards
the driver's time."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402
from bench_module import load_bench  # noqa: E402


def test_a_round_splits_into_driver_and_worker_time_and_its_prediction_falls_to_the_driver(tmp_path) -> None:
    plan = load_bench("cluster_plan")
    run = E.strategy_run("coda")
    costs = plan.round_costs(run)
    assert costs["workers"] == 1 and list(costs["rounds"]) == [1]
    phases = costs["rounds"][1]
    assert {"evaluate", "diagnose", "verify", "train"} <= set(phases)
    assert phases["diagnose"]["driver_s"] == phases["diagnose"]["seconds"]  # all in the driver
    assert phases["evaluate"]["driver_s"] == 0.0  # all on the workers
    assert 0.0 < phases["train"]["driver_s"] <= phases["train"]["seconds"]  # training, not the demos
    out = plan.predict(costs, speedup=1.0)
    t = [out["predicted_round_s"][str(n)] for n in plan.WORKERS]
    pr = out["per_round"]
    assert abs(t[0] - (pr["driver_s"] + pr["parallel_s"])) < 0.2  # one worker: the run's own time
    assert all(a >= b for a, b in zip(t, t[1:])) and t[-1] >= pr["driver_s"]
    shares = [out["driver_share_at"][str(n)] for n in plan.WORKERS]
    assert all(a <= b for a, b in zip(shares, shares[1:]))
    assert plan.main([str(run), "--speedup", "1.0", "--out", str(tmp_path / "plan.json")]) == 0
    assert (tmp_path / "plan.json").exists()
