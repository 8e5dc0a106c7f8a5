"""Writer of the atomicity tests: phases of N scenario records each, skipping phases already committed.

    python memory_phase_writer.py RUN_DIR [--url URL] [--rounds R] [--phases a,b] [--n N] [--sleep S]

Prints `ready`, then `begin R PHASE` / `commit R PHASE` around each phase it writes, then `done`. The tests
also call `write_phases` in a forked process (no interpreter start-up) to kill it at chosen moments.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from coda.memory import Scenario, open_memory

RUN = "killed-run"


def write_phases(
    run_dir: str, url: str | None, rounds: int, phases: list[str], n: int, sleep: float, emit: Callable[[str], None]
) -> None:
    """Write every phase of every round that has no marker yet; `emit` reports progress lines."""
    with open_memory(run_dir, url) as mem:
        mem.create_run(RUN, config={"test": True}, seed=0, strategy="test", exist_ok=True)
        emit("ready")
        for r in range(rounds):
            for phase in phases:
                if mem.phase_done(RUN, r, phase):
                    continue
                with mem.phase(RUN, r, phase) as tx:
                    emit(f"begin {r} {phase}")
                    for i in range(n):
                        tx.add(Scenario(spec_id=f"{r}-{phase}-{i}", spec={"i": i}, family="push", split=phase))
                        time.sleep(sleep)
                emit(f"commit {r} {phase}")
    emit("done")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--url", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phases", default="evaluate,diagnose,train")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--sleep", type=float, default=0.02)
    args = ap.parse_args()
    write_phases(args.run_dir, args.url, args.rounds, args.phases.split(","), args.n, args.sleep,
                 lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
