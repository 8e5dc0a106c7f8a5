"""Writer process of the atomicity tests: phases of N scenario records each, skipping committed phases.

    python phase_writer.py RUN_DIR [--url URL] [--rounds R] [--phases a,b] [--n N] [--sleep S]

Prints `ready`, then `begin R PHASE` / `commit R PHASE` around each phase it writes, then `done`.
"""

from __future__ import annotations

import argparse
import time

from coda.memory import Scenario, open_memory

RUN = "killed-run"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--url", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phases", default="evaluate,diagnose,train")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--sleep", type=float, default=0.02)
    args = ap.parse_args()
    with open_memory(args.run_dir, args.url) as mem:
        mem.create_run(RUN, config={"test": True}, seed=0, strategy="test", exist_ok=True)
        print("ready", flush=True)
        for r in range(args.rounds):
            for phase in args.phases.split(","):
                if mem.phase_done(RUN, r, phase):
                    continue
                with mem.phase(RUN, r, phase) as tx:
                    print(f"begin {r} {phase}", flush=True)
                    for i in range(args.n):
                        tx.add(Scenario(spec_id=f"{r}-{phase}-{i}", spec={"i": i}, family="push", split=phase))
                        time.sleep(args.sleep)
                print(f"commit {r} {phase}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
