"""The Ray executor (`runtime.executor = "ray"`, `coda.runtime.executor.RayExecutor`) on a local Ray started
by the test (loopback, no dashboard): jobs come back in order, a checkpoint travels by content, a worker
killed mid-map is replaced and its job retried, and a `tiny` round run on Ray ends with the same memory as
the same round on the local executor."""

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


def test_a_tiny_round_on_ray_matches_the_local_executor(executor, tmp_path: Path) -> None:
    from coda.engine.loop import run, start_run

    reference = E.memory_contents(E.strategy_run("coda"))
    path = tmp_path / "on_ray"
    with start_run(E.config("coda", extra=("runtime.executor=ray",)), path, from_round0=E.round0()) as ctx:
        run(ctx, report=False)
        assert ctx.executor.name == "ray"
    got = E.memory_contents(path)
    for kind in reference:
        assert got[kind] == reference[kind], f"{kind} records differ between the Ray and the local executor"
