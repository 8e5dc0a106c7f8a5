"""One writer per run directory: a second `coda run --resume` is refused at once with the holder's pid; the
lock dies with its holder (a killed run resumes at once); resume refuses a renamed directory and a missing
memory file instead of starting again from round 0."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402

from coda.engine.context import LOCK_FILE, RunDirError, RunDirLock  # noqa: E402
from coda.engine.loop import resume_run  # noqa: E402
from coda.memory.errors import MemoryNotFoundError  # noqa: E402

HOLD = """
import sys, time
from pathlib import Path
from coda.engine.loop import resume_run
ctx = resume_run(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_writer_is_refused_at_once_naming_the_holder_and_the_lock_dies_with_it(tmp_path: Path) -> None:
    run_dir = E.root() / "round0"
    E.round0()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        proc = E.coda_cli("run", "--resume", str(run_dir), timeout=60)
        assert time.monotonic() - t0 < 30
        assert proc.returncode != 0
        assert f"is in use by process {holder.pid}" in proc.stderr, proc.stderr[-1500:]
        assert "Traceback" not in proc.stderr
        with pytest.raises(RunDirError, match=f"in use by process {holder.pid}"):
            resume_run(run_dir)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    ctx = resume_run(run_dir)  # the killed holder's lock is gone
    assert ctx.lock is not None and ctx.lock.held
    assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())
    ctx.close()
    assert not ctx.lock.held


def test_the_lock_is_exclusive_within_a_process_too(tmp_path: Path) -> None:
    first = RunDirLock(tmp_path)
    with pytest.raises(RunDirError, match=f"in use by process {os.getpid()}"):
        RunDirLock(tmp_path)
    first.release()
    RunDirLock(tmp_path).release()


def test_resume_refuses_a_renamed_directory_and_a_missing_memory(tmp_path: Path) -> None:
    renamed = tmp_path / "renamed"
    shutil.copytree(E.round0(), renamed, ignore=shutil.ignore_patterns(LOCK_FILE))
    with pytest.raises(RunDirError, match="no run 'renamed'.*was the directory renamed"):
        resume_run(renamed)
    (renamed / "memory.sqlite").unlink()
    with pytest.raises(MemoryNotFoundError):
        resume_run(renamed)
    assert not (renamed / "memory.sqlite").exists()  # not recreated empty


def test_resume_dot_resumes_the_directory_it_names(tmp_path: Path) -> None:
    here = tmp_path / "round0"
    shutil.copytree(E.round0(), here, ignore=shutil.ignore_patterns(LOCK_FILE))
    with E.open_run(here) as mem:
        before = mem.completed_phases("round0")
    proc = subprocess.run([sys.executable, "-m", "coda", "run", "--resume", "."], cwd=here, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-1500:]
    with E.open_run(here) as mem:
        assert mem.completed_phases("round0") == before and [r.id for r in mem.runs()] == ["round0"]
