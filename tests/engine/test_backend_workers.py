"""A round backend's parallel jobs (`coda.engine.backend`): its workers are a pool set up once and kept for
every map, and validity checks, split building, demos and train-phase episodes give the same results on two
workers as in one process."""

from __future__ import annotations

import os

import numpy as np

from coda.config import build_config
from coda.engine.backend import EpisodeJob, RoundBackend
from coda.policy.data import DemoDataset
from coda.runtime.executor import LocalExecutor
from coda.scene.splits import make_split

SETTINGS = ["policy.text_model=hashing", "policy.torch_threads=1", "sim.max_steps=80"]
_SETUPS: list[int] = []  # this process's set-ups (in a worker: that worker's)


def _setup() -> None:
    _SETUPS.append(os.getpid())


def _who(x: int) -> tuple[int, int, int]:
    return x * 3, os.getpid(), len(_SETUPS)


def _who_with_both(job: tuple[int, str]) -> tuple[int, int, int]:
    """`_who`, once both workers have taken a job (each job leaves its pid in a shared folder; 30 s at most)."""
    import time
    from pathlib import Path

    x, folder = job
    (Path(folder) / str(os.getpid())).touch()
    deadline = time.monotonic() + 30
    while len(list(Path(folder).iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return _who(x)


def test_a_pool_sets_its_workers_up_once_and_keeps_them_for_every_map(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with LocalExecutor(2).pool(_setup) as pool:
        first = list(pool.map(_who_with_both, [(x, str(tmp_path)) for x in range(8)]))  # both workers take jobs
        second = list(pool.map(_who, list(range(8, 12))))
    assert [v for v, _, _ in first + second] == [3 * x for x in range(12)]  # in job order
    pids = {pid for _, pid, _ in first}
    assert os.getpid() not in pids and len(pids) == 2
    assert {n for _, _, n in first + second} == {1}  # each worker set up once, for both maps
    assert {pid for _, pid, _ in second} <= pids  # the same workers


def test_one_worker_runs_in_this_process_and_is_closed_with_the_pool() -> None:
    closed: list[bool] = []
    before = len(_SETUPS)
    pool = LocalExecutor(1).pool(_setup, close=lambda: closed.append(True))
    assert [pid for _, pid, _ in pool.map(_who, [1, 2])] == [os.getpid()] * 2
    assert list(pool.map(_who, [3]))[0][0] == 9 and len(_SETUPS) == before + 1  # set up once
    pool.close()
    assert closed == [True]


def _episodes(path) -> list:  # type: ignore[no-untyped-def]
    return list(DemoDataset(path).episodes())


def test_two_workers_give_what_one_process_gives(tmp_path) -> None:  # type: ignore[no-untyped-def]
    one = build_config("tiny", overrides=SETTINGS + ["runtime.workers=1"])
    two = build_config("tiny", overrides=SETTINGS + ["runtime.workers=2"])
    with RoundBackend(one) as a, RoundBackend(two) as b:
        assert (a.workers, b.workers, b.check_batch) == (1, 2, 2)
        split_a, split_b = a.build_split("push", "train", "sft", 5, 3), b.build_split("push", "train", "sft", 5, 3)
        assert [s.spec_id for s in split_a[0]] == [s.spec_id for s in split_b[0]]
        assert [(s.spec_id, r) for s, r in split_a[1]] == [(s.spec_id, r) for s, r in split_b[1]]
        candidates = make_split("pick_place", "position", 6, seed=4)
        assert a.check_many(candidates) == b.check_many(candidates)
        scenes = split_a[0][:4]
        ra, rb = a.collect_demos(scenes, tmp_path / "one"), b.collect_demos(scenes, tmp_path / "two")
        assert (ra.written, ra.failed_specs, ra.steps) == (rb.written, rb.failed_specs, rb.steps) and ra.written > 0
        for ea, eb in zip(_episodes(tmp_path / "one"), _episodes(tmp_path / "two"), strict=True):
            assert ea.spec_id == eb.spec_id and ea.success and eb.success
            np.testing.assert_array_equal(ea.actions, eb.actions)
            np.testing.assert_array_equal(ea.potentials, eb.potentials)
            assert (ea.wordings, ea.goal_rows) == (eb.wordings, eb.goal_rows)
        replays = [EpisodeJob("replay", s, actions=ep.actions[:20]) for s, ep in zip(scenes, _episodes(tmp_path / "one"))]
        for ea, eb in zip(a.round_episodes(replays), b.round_episodes(replays), strict=True):
            np.testing.assert_array_equal(ea.actions, eb.actions)
            np.testing.assert_array_equal(ea.potentials, eb.potentials)
            assert ea.success == eb.success
        assert a.worker_jobs == 0 and b.worker_jobs > 0  # one process ran a's jobs, b's workers ran b's
    assert b._pool is None  # closed with the backend
