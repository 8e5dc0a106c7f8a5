"""A run killed with SIGKILL in a phase and resumed ends with the same memory as an uninterrupted run.

The engine's test hook `CODA_KILL_AT=ROUND:PHASE:WHEN` (`coda.engine.context`) makes `coda run` SIGKILL itself
at the start of that phase or, with WHEN = `commit`, once the phase's work is done and its records are about
to commit — the harshest point: every file of the phase is written, nothing is committed. One run is killed at
several points in turn (each `coda run --resume` is killed at the next point), then resumed to the end. Its
records must equal, ids and timestamps aside, those of the uninterrupted run with the same seed and config
(the shared round 0 + one `coda` round, `engine_runs`): nothing lost, nothing duplicated, nothing different.

The default chain kills in three phases that write files before they commit (one of round 0, two of round 1);
`CODA_TEST_KILL_PHASES=all` kills before the commit of every phase of both rounds instead (eleven kills, about
three times as long).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402

from coda.engine.context import KILL_ENV, RunDirError, kill_point  # noqa: E402

ROUND0 = ("scenes", "demos", "train", "measure")
ROUND1 = ("evaluate", "diagnose", "verify", "compile", "generate", "train", "measure")
DEFAULT_KILLS = ("0:demos:commit", "1:evaluate:commit", "1:train:commit")
ALL_KILLS = tuple(f"0:{p}:commit" for p in ROUND0) + tuple(f"1:{p}:commit" for p in ROUND1)
KILLS = ALL_KILLS if os.environ.get("CODA_TEST_KILL_PHASES") == "all" else DEFAULT_KILLS


def _phases_before(point: str) -> list[tuple[int, str]]:
    r, phase, _ = point.split(":")
    order = [(0, p) for p in ROUND0] + [(1, p) for p in ROUND1]
    return order[: order.index((int(r), phase))]


def _killed_and_resumed(run_dir: Path, settings: list[str]) -> None:
    """`coda run` with `settings`, SIGKILLed at each of KILLS in turn (each resume killed at the next), then
    resumed to the end."""
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    start = ["run", "--preset", "tiny", "--family", E.FAMILY, "--run-dir", str(run_dir)]
    start += [a for s in settings for a in ("--set", s)]
    for i, point in enumerate(KILLS):
        args = start if i == 0 else ["run", "--resume", str(run_dir)]
        proc = E.coda_cli(*args, env={**env, KILL_ENV: point})
        assert proc.returncode == -signal.SIGKILL, f"not killed at {point}: rc {proc.returncode}\n{proc.stderr[-2000:]}"
        with E.open_run(run_dir) as mem:  # killed exactly there: every earlier phase committed, that one not
            assert mem.completed_phases(run_dir.name) == _phases_before(point), point
    assert (run_dir / "checkpoints" / "round_001.pt").is_file()  # the killed train phase had written its files
    proc = E.coda_cli("run", "--resume", str(run_dir), env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with E.open_run(run_dir) as mem:
        assert mem.get_run(run_dir.name).status == "done"
    assert not list(run_dir.rglob("*.partial"))


def test_run_killed_in_phases_and_resumed_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    reference = E.memory_contents(E.strategy_run("coda"))
    run_dir = tmp_path / "killed"
    _killed_and_resumed(run_dir, E.settings("coda"))
    resumed = E.memory_contents(run_dir)
    for kind in reference:
        assert resumed[kind] == reference[kind], f"{kind} records differ after kills at {KILLS}"


def test_with_the_minilm_text_model_a_resumed_run_is_bit_identical(tmp_path: Path) -> None:
    """The default text model: embeddings computed in a resumed process (other strings, other order) must be
    the ones the uninterrupted run computed, so records, artifacts (sha256) and weights match exactly."""
    settings = [s for s in E.settings("coda") if not s.startswith("policy.text_model=")]
    assert "policy.text_model=minilm" not in settings
    reference_dir = tmp_path / "minilm-reference"
    args = ["run", "--preset", "tiny", "--family", E.FAMILY, "--run-dir", str(reference_dir)]
    proc = E.coda_cli(*args, *[a for s in settings for a in ("--set", s)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    from coda.config import load_config_file

    assert load_config_file(reference_dir / "config.yaml").policy.text_model == "minilm"
    run_dir = tmp_path / "minilm-killed"
    _killed_and_resumed(run_dir, settings)
    reference, resumed = E.memory_contents(reference_dir), E.memory_contents(run_dir)
    for kind in reference:
        assert resumed[kind] == reference[kind], f"{kind} records differ after kills at {KILLS}"


def test_kill_hook_fires_only_at_its_point_and_rejects_a_malformed_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KILL_ENV, "1:train:commit")
    kill_point(1, "train")  # the start of the phase is not the point
    kill_point(2, "train", "commit")
    kill_point(1, "measure", "commit")
    monkeypatch.setenv(KILL_ENV, "train")
    with pytest.raises(RunDirError, match="CODA_KILL_AT = 'train' must look like ROUND:PHASE"):
        kill_point(0, "train")
