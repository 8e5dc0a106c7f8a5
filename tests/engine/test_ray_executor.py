"""The Ray executor (`runtime.executor = "ray"`, `coda.runtime.executor.RayExecutor`) on a local Ray started
by the test (loopback, no dashboard): jobs come back in order, a checkpoint travels by content, a worker
killed mid-map is replaced and its job retried (on the shared queue, the items it had taken run again), and a `tiny` round run on two Ray actors (rollouts, validity
checks, demos and verification episodes) ends with the same memory as the same round in one local process."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared runs helper, in any pytest import mode

import engine_runs as E  # noqa: E402

from coda.runtime.executor import RayExecutor, local_file  # noqa: E402

ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module


@pytest.fixture(scope="module")
def executor():
    ex = RayExecutor(workers=2)
    yield ex
    ex.close()
    assert not ray.is_initialized()


def _square(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _die_once(args: tuple[int, str]) -> int:
    """SIGKILL this worker the first time job 3 runs (a marker file says it ran), then answer."""
    x, marker = args
    if x == 3 and not Path(marker).exists():
        Path(marker).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return x + 100


def _read(shipped: object) -> bytes:
    return local_file(shipped).read_bytes()  # type: ignore[arg-type]


def test_jobs_come_back_in_order_from_two_actors(executor) -> None:
    out = list(executor.map(_square, list(range(12))))
    assert [v for v, _ in out] == [x * x for x in range(12)]
    assert len({pid for _, pid in out}) == 2 and os.getpid() not in {pid for _, pid in out}


def test_a_file_is_shipped_by_content(executor, tmp_path: Path) -> None:
    f = tmp_path / "policy.pt"
    f.write_bytes(b"weights \x00\x01")
    shipped = executor.ship(f)
    f.unlink()  # the workers read the object store, not this path
    assert list(executor.map(_read, [shipped, shipped])) == [b"weights \x00\x01"] * 2


def test_a_killed_worker_is_replaced_and_its_job_retried(executor, tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    out = list(executor.map(_die_once, [(x, str(marker)) for x in range(6)]))
    assert marker.read_text() == "killed"  # job 3's worker did die
    assert out == [x + 100 for x in range(6)]


def _die_on_3(taken):  # type: ignore[no-untyped-def]
    """A queue job that SIGKILLs its worker the first time it takes item 3 (a marker file says it did)."""
    out = []
    for i, (x, marker) in taken:
        if x == 3 and not Path(marker).exists():
            Path(marker).write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        out.append((i, (x + 100, os.getpid())))
    return out


def test_the_shared_queue_runs_every_item_once_also_past_a_killed_worker(executor, tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    got = list(executor.map_queue(_die_on_3, [(x, str(marker)) for x in range(20)], quota=4))
    assert marker.read_text() == "killed"  # the worker that took item 3 did die
    assert sorted((i, v) for i, (v, _) in got) == [(x, x + 100) for x in range(20)]  # lost items ran again
    assert len({pid for _, (_, pid) in got}) >= 2


def test_a_tiny_round_on_ray_matches_the_local_executor(executor, tmp_path: Path) -> None:
    from coda.engine.loop import run, start_run

    reference = E.memory_contents(E.strategy_run("coda"))
    path = tmp_path / "on_ray"
    # two actors: the rollouts and the backend's checks, demos and verification episodes all run on Ray
    with start_run(E.config("coda", extra=("runtime.executor=ray", "runtime.workers=2")), path,
                   from_round0=E.round0()) as ctx:
        run(ctx)
        assert ctx.executor.name == "ray" and ctx.backend.workers == 2
        assert ctx.backend.worker_jobs > 0
    got = E.memory_contents(path)
    for kind in reference:
        assert got[kind] == reference[kind], f"{kind} records differ between Ray (two workers) and one local process"


def _dying_in_measure(eval_ids: frozenset[str], marker_dir: str):  # type: ignore[no-untyped-def]
    """`_run_stream` that SIGKILLs its Ray worker on each of its first four jobs that take an evaluation scene
    (the measure phase): the job's retry dies too, so the map fails."""

    def stream(scenes, **kw):  # type: ignore[no-untyped-def]
        import itertools

        from coda.engine import rollout  # in the worker: its own module, unpatched, set up by _init_worker

        first = next(scenes, None)
        if first is not None and first[1].spec_id in eval_ids:
            for i in range(4):
                try:
                    os.close(os.open(Path(marker_dir) / f"kill{i}", os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    continue
                os.kill(os.getpid(), signal.SIGKILL)
        return rollout._run_stream(itertools.chain([first] if first else [], scenes), **kw)

    return stream


def test_a_round_whose_ray_worker_dies_fails_cleanly_and_resumes(executor, tmp_path: Path, monkeypatch) -> None:
    from coda.engine import rollout
    from coda.engine.loop import resume_run, run, start_run
    from coda.runtime.executor import ExecutorError

    reference = E.memory_contents(E.strategy_run("coda"))
    with E.open_run(E.round0()) as mem:
        eval_ids = frozenset(mem.get("scenario", e.scenario_id).spec_id
                             for e in mem.list("episode", run_id="round0") if e.phase == "measure")
    markers = tmp_path / "markers"
    markers.mkdir()
    path = tmp_path / "killed"
    monkeypatch.setattr(rollout, "_run_stream", _dying_in_measure(eval_ids, str(markers)))
    with pytest.raises(ExecutorError, match="a Ray worker died"):
        with start_run(E.config("coda", extra=("runtime.executor=ray",)), path, from_round0=E.round0()) as ctx:
            run(ctx)
    assert len(list(markers.iterdir())) >= 2  # the job and its retry were killed
    with E.open_run(path) as mem:
        done = mem.completed_phases(path.name)
    assert (1, "train") in done and (1, "measure") not in done  # the round stopped in its measure phase

    monkeypatch.undo()
    with resume_run(path) as ctx:
        run(ctx)
    got = E.memory_contents(path)
    for kind in reference:
        assert got[kind] == reference[kind], f"{kind} records differ after the resumed run"
