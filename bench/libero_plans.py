"""Text2potential on LIBERO's tasks: does the privileged critic's stage plan in words compile back to the goal?

For the first official initial state of every task of the given suites, reads the state, writes the critic's
stage plan in words (`coda.critic.libero.stage_plan_words`), compiles it with Text2potential against the
scenario's entities (`coda.critic.libero.try_libero_plan`) and compares the stages with the goal's canonical
program; also checks that the entities read from the BDDL alone (`libero_entities(scenario)`, what the planner
uses) are those the state lists. Tasks whose goal is not one `in` / `on` predicate are counted apart, with
the reason. Writes `bench/results/libero_plans.json`:

    {"tasks": [{"suite", "task", "status": "compiled" | "mismatch" | "not_in_on", "plan", "reason"}],
     "compiled": int, "mismatch": int, "not_in_on": int, "command": str}

Usage:
    python bench/libero_plans.py                      # libero_object libero_spatial libero_goal libero_10
    python bench/libero_plans.py --suites libero_object
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# This folder holds bench/libero.py, named like the LIBERO package: keep it off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

OUT = Path(__file__).parent / "results" / "libero_plans.json"
SUITES = ["libero_object", "libero_spatial", "libero_goal", "libero_10"]


def main() -> None:
    from coda.critic.libero import libero_entities, libero_trace_facts, stage_plan_words, try_libero_plan
    from coda.shaping.text2potential import PlanRejected
    from coda.sim.libero import suites as S
    from coda.sim.libero.env import LiberoEnv
    from coda.sim.libero.errors import LiberoError
    from coda.sim.libero.scenario import LiberoScenario

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suites", nargs="+", default=SUITES)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    env = LiberoEnv()
    rows = []
    try:
        for suite in args.suites:
            for task in range(len(S.list_tasks(suite))):
                scenario = LiberoScenario(suite, task, init_state=0)
                env.reset_to(scenario)
                s0 = env.state()
                row = {"suite": suite, "task": task, "plan": None, "reason": ""}
                try:
                    facts = libero_trace_facts([s0, s0], scenario)
                except LiberoError as e:
                    rows.append({**row, "status": "not_in_on", "reason": str(e).split("\n")[0][:200]})
                    print(suite, task, "not one in/on")
                    continue
                plan = stage_plan_words(facts)
                pot = try_libero_plan(plan, s0, scenario)
                same = dict(libero_entities(scenario).kinds) == dict(libero_entities(scenario, s0).kinds)
                ok = not isinstance(pot, PlanRejected) and pot.program.stages == facts.program.stages and same
                reason = pot.reason if isinstance(pot, PlanRejected) else ("" if same else "BDDL entities differ")
                rows.append({**row, "status": "compiled" if ok else "mismatch", "plan": plan, "reason": reason})
                print(suite, task, rows[-1]["status"], plan.replace("\n", " "))
    finally:
        env.close()
    count = {k: sum(r["status"] == k for r in rows) for k in ("compiled", "mismatch", "not_in_on")}
    cmd = "python bench/libero_plans.py" + ("" if args.suites == SUITES else " --suites " + " ".join(args.suites))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tasks": rows, **count, "command": cmd}, indent=1) + "\n")
    print(count, "->", args.out)


if __name__ == "__main__":
    main()
