"""Phases are atomic across processes: SIGKILL mid-phase leaves whole phases only; readers never see torn state.

Writers killed at chosen moments are forked (the interpreter and SQLAlchemy are already loaded, so each
attempt starts in milliseconds); the resume runs the writer script in a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from memory_phase_writer import RUN, write_phases
from sqlalchemy import insert

from coda.memory import Scenario

WRITER = Path(__file__).with_name("memory_phase_writer.py")
PHASES = ("evaluate", "diagnose", "train")
N = 6  # records per phase
SLEEP = 0.02  # seconds between records: a phase stays open longer than N * SLEEP
FORK = mp.get_context("fork")


def all_phases(rounds: int) -> list[tuple[int, str]]:
    return [(r, p) for r in range(rounds) for p in PHASES]


def _writer_child(events: Connection, args: tuple[Any, ...]) -> None:
    write_phases(*args, emit=events.send)


def fork_writer(backend, rounds: int, n: int = N, sleep: float = SLEEP) -> tuple[Any, Connection]:  # type: ignore[no-untyped-def]
    """Start `write_phases` in a forked process; returns it and the receiving end of its progress lines."""
    receive, send = FORK.Pipe(duplex=False)
    proc = FORK.Process(target=_writer_child, args=(send, (str(backend.run_dir), backend.url, rounds, list(PHASES), n, sleep)))
    proc.start()
    send.close()
    return proc, receive


def receive_lines(events: Connection, until: Any, timeout: float = 60.0) -> list[str]:
    """Progress lines until `until(lines)` holds or the writer ends."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while not until(lines):
        if not events.poll(max(0.0, deadline - time.monotonic())):
            raise AssertionError(f"writer silent for {timeout} s after {lines}")
        try:
            lines.append(events.recv())
        except EOFError:
            break
    return lines


def check_invariant(view, rounds: int, n: int = N) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    """Within one snapshot: marker present <=> all n records of that phase present; no other records."""
    done = view.completed_phases(RUN)
    assert len(done) == len(set(done)), f"duplicate phase markers: {done}"
    for r, p in all_phases(rounds):
        got = view.count(Scenario, RUN, r, phase=p)
        want = n if (r, p) in done else 0
        assert got == want, f"round {r} phase {p}: marker {'present' if want else 'absent'} but {got} records"
    assert view.count(Scenario, RUN) == n * len(done)
    return done


@pytest.mark.timeout(180)
def test_sigkill_mid_phase_leaves_whole_phases_and_resume_writes_each_once(backend) -> None:  # type: ignore[no-untyped-def]
    rounds = 2
    rng = random.Random(20261129)
    kills_mid_phase = 0
    done: list[tuple[int, str]] = []
    for _ in range(5):
        proc, events = fork_writer(backend, rounds)
        begins = rng.randint(1, 2)  # kill during the first or the second phase this attempt opens
        lines = receive_lines(events, lambda ls: sum(x.startswith("begin") for x in ls) >= begins or "done" in ls)
        time.sleep(rng.uniform(0.0, N * SLEEP))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        lines += receive_lines(events, lambda ls: False, timeout=5)  # whatever it sent before dying
        assert proc.exitcode in (-signal.SIGKILL, 0)
        with backend.open() as mem, mem.snapshot() as view:
            done = check_invariant(view, rounds)
        begun = [line.split()[1:] for line in lines if line.startswith("begin")]
        if begun and (int(begun[-1][0]), begun[-1][1]) not in done:
            kills_mid_phase += 1
    assert kills_mid_phase >= 3, "the kills should interrupt open phases; the test would prove nothing otherwise"

    before = set(done)
    cmd = [sys.executable, str(WRITER), str(backend.run_dir), "--rounds", str(rounds), "--n", str(N),
           "--sleep", "0", "--phases", ",".join(PHASES), *(["--url", backend.url] if backend.url else [])]
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    rewritten = {(int(line.split()[1]), line.split()[2]) for line in resumed.stdout.splitlines() if line.startswith("commit")}
    assert rewritten == set(all_phases(rounds)) - before  # only the missing phases, each once
    with backend.open() as mem, mem.snapshot() as view:
        assert check_invariant(view, rounds) == all_phases(rounds)


@pytest.mark.timeout(180)
def test_reader_polling_during_commits_never_sees_torn_state(backend) -> None:  # type: ignore[no-untyped-def]
    rounds, n = 3, 8
    seen: set[int] = set()
    polls = 0
    with backend.open() as mem:
        proc, events = fork_writer(backend, rounds, n=n, sleep=0.01)
        try:
            while proc.is_alive():
                with mem.snapshot() as view:
                    seen.add(len(check_invariant(view, rounds, n)))
                polls += 1
                time.sleep(0.002)  # leave the writer some CPU on a two-core machine
            proc.join(30)
            with mem.snapshot() as view:
                assert check_invariant(view, rounds, n) == all_phases(rounds)
        finally:
            if proc.is_alive():
                proc.kill()
                proc.join(30)
    assert proc.exitcode == 0
    intermediate = seen - {0, len(all_phases(rounds))}
    assert len(intermediate) >= 2, f"the reader should observe commits in progress (saw {sorted(seen)} in {polls} polls)"


def _open_and_create_run(backend, start: Any, index: int) -> None:  # type: ignore[no-untyped-def]
    start.wait(30)
    with backend.open() as mem:
        mem.create_run(f"opener-{index}", config={}, seed=index, strategy="test")


def test_processes_opening_a_fresh_memory_at_once_create_the_schema_once(backend) -> None:  # type: ignore[no-untyped-def]
    start = FORK.Event()
    procs = [FORK.Process(target=_open_and_create_run, args=(backend, start, i)) for i in range(3)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with backend.open() as mem:
        assert sorted(r.id for r in mem.runs()) == ["opener-0", "opener-1", "opener-2"]


def test_invariant_check_detects_a_torn_phase(tmp_path: Path) -> None:
    """The check above can fail: records of a phase without its marker are reported."""
    from coda.memory import open_memory

    with open_memory(tmp_path) as mem:
        mem.create_run(RUN, config={}, seed=0, strategy="test")
        with mem.engine.begin() as conn:  # bypasses `phase`: records without a marker
            conn.execute(insert(Scenario.__table__), [
                {"run_id": RUN, "round": 0, "phase": "evaluate", "spec_id": f"s{i}", "spec": {}, "family": "push",
                 "valid": True} for i in range(N)
            ])
        with mem.snapshot() as view, pytest.raises(AssertionError, match="round 0 phase evaluate: marker absent but 6"):
            check_invariant(view, 1)


def _forked_use(mem, send: Connection) -> None:  # type: ignore[no-untyped-def]
    with mem.phase(RUN, 0, "evaluate") as tx:
        tx.add(Scenario(spec_id="from-child", spec={}, family="push"))
    pid = None
    if mem.backend == "postgresql":
        with mem.engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    send.send((mem.count(Scenario, RUN), pid))


def test_memory_inherited_by_a_forked_worker_uses_its_own_connection(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.open() as mem:
        mem.create_run(RUN, config={}, seed=0, strategy="test")
        parent_pid = None
        if mem.backend == "postgresql":
            with mem.engine.connect() as conn:  # leaves an idle pooled connection for the child to inherit
                parent_pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        receive, send = FORK.Pipe(duplex=False)
        proc = FORK.Process(target=_forked_use, args=(mem, send))
        proc.start()
        assert receive.poll(60), "forked worker did not answer"
        count, child_pid = receive.recv()
        proc.join(30)
        assert proc.exitcode == 0 and count == 1
        assert child_pid is None or child_pid != parent_pid
        with pytest.raises(Exception, match="phases do not nest"):
            with mem.phase(RUN, 0, "train"), mem.phase(RUN, 0, "measure"):
                pass
        assert mem.completed_phases(RUN) == [(0, "evaluate")] and mem.count(Scenario, RUN) == 1
