"""The executors' shared work queue (`executor.map_queue`): every item is run once and comes back under its
index, workers take items as they free up (a slow share does not stay with one worker), one worker runs in
this process, and items a job took but never returned are run again (or the map fails, naming how many)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from coda.runtime.executor import ExecutorError, LocalExecutor

_CALLS: list[str] = []  # this process's set-ups and close-downs
_DROPPED: set[int] = set()  # items `_drop_once` has dropped in this process


def _setup(tag: str) -> None:
    _CALLS.append(f"init {tag}")


def _teardown() -> None:
    _CALLS.append("close")


def _double(taken: Iterator[tuple[int, float]]) -> list[tuple[int, tuple[float, int]]]:
    out = []
    for i, x in taken:
        time.sleep(x)
        out.append((i, (2 * x, os.getpid())))
    return out


def _drop_once(taken: Iterator[tuple[int, int]]) -> list[tuple[int, int]]:
    """Takes its items, returns item 3 only on the second time it is taken (as a job that died would)."""
    out = []
    for i, x in taken:
        if x == 3 and x not in _DROPPED:
            _DROPPED.add(x)
            continue
        out.append((i, x + 100))
    return out


def _drop_always(taken: Iterator[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(i, x) for i, x in taken if x != 3]


def test_every_item_comes_back_once_under_its_index() -> None:
    items = [0.001 * (i % 3) for i in range(40)]
    got = list(LocalExecutor(2).map_queue(_double, items, quota=8))
    assert sorted(i for i, _ in got) == list(range(40))
    assert all(v == 2 * items[i] for i, (v, _) in got)
    assert len({pid for _, (_, pid) in got}) == 2 and os.getpid() not in {pid for _, (_, pid) in got}


def test_workers_take_items_as_they_free_up() -> None:
    # The slow items all sit in the first half: a fixed split would leave them to one worker.
    items = [0.15] * 10 + [0.0] * 30
    got = dict(LocalExecutor(2).map_queue(_double, items, quota=len(items)))
    slow = {got[i][1] for i in range(10)}
    assert len(slow) == 2, "one worker ran every slow item"


def test_one_worker_runs_in_this_process_set_up_and_closed_once() -> None:
    _CALLS.clear()
    got = list(LocalExecutor(1).map_queue(_double, [0.0] * 9, quota=4, init=_setup, initargs=("a",),
                                          close=_teardown))
    assert sorted(i for i, _ in got) == list(range(9)) and {pid for _, (_, pid) in got} == {os.getpid()}
    assert _CALLS == ["init a", "close"]


def test_items_taken_but_not_returned_are_run_again() -> None:
    _DROPPED.clear()
    got = list(LocalExecutor(1).map_queue(_drop_once, list(range(8)), quota=3))
    assert sorted(got) == [(i, i + 100) for i in range(8)]
    assert got[-1] == (3, 103)  # the second pass, after the first had handed back the rest
    with pytest.raises(ExecutorError, match="1 work items were taken by workers that died"):
        list(LocalExecutor(1).map_queue(_drop_always, list(range(8)), quota=3))
