"""Drawing valid scenes in batches keeps what a check per candidate keeps."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from coda.engine.backend import RoundBackend, valid_scenes
from coda.errors import CodaError


@dataclass(frozen=True)
class Scene:
    n: int

    @property
    def spec_id(self) -> str:
        return f"s{self.n}"


class ModuloBackend(RoundBackend):
    """Scenes whose number is a multiple of 3 are invalid; records every batch it was asked to check."""

    check_batch = 1

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def check(self, spec: Scene) -> tuple[bool, str]:
        return (spec.n % 3 != 0, "" if spec.n % 3 else f"{spec.n} is a multiple of 3")

    def check_many(self, specs: list[Scene]) -> list[tuple[bool, str]]:
        self.batches.append([s.n for s in specs])
        return [self.check(s) for s in specs]


def stream(numbers: list[int], fail_after: int | None = None) -> Iterator[Scene]:
    for k, n in enumerate(numbers):
        if fail_after is not None and k == fail_after:
            raise CodaError("the program cannot place object 'x'\nmore detail")
        yield Scene(n)


NUMBERS = [1, 3, 1, 4, 6, 5, 7, 9, 8, 10, 11, 12]


@pytest.mark.parametrize("n,max_tries", [(3, 50), (5, 50), (4, 6), (20, 50)])
def test_batches_keep_what_one_check_at_a_time_keeps(n: int, max_tries: int) -> None:
    one = valid_scenes(ModuloBackend(), stream(NUMBERS), n, max_tries, seen=(seen1 := {"s8"}), batch=1)
    for batch in (2, 3, 7):
        backend = ModuloBackend()
        many = valid_scenes(backend, stream(NUMBERS), n, max_tries, seen=(seen := {"s8"}), batch=batch)
        assert many.checked == one.checked and many.tries == one.tries and many.stopped == one.stopped
        assert seen == seen1  # candidates drawn ahead of the n-th valid one are given back
        assert max(len(b) for b in backend.batches) > 1
    # one candidate at a time, written out: a repeat or an already seen scene is a try but no check
    checked, seen_ref, tries = [], {"s8"}, 0
    for x in NUMBERS:
        if sum(ok for _, ok in checked) >= n or tries >= max_tries:
            break
        tries += 1
        if f"s{x}" not in seen_ref:
            seen_ref.add(f"s{x}")
            checked.append((x, x % 3 != 0))
    assert [(s.n, ok) for s, ok, _ in one.checked] == checked and one.tries == tries and seen1 == seen_ref
    assert one.stopped == ("ran dry after 12 candidates" if tries == len(NUMBERS) and sum(ok for _, ok in checked) < n else "")


def test_a_stream_that_ends_or_raises_says_why() -> None:
    dry = valid_scenes(ModuloBackend(), stream([1, 2, 3]), 5, 50, batch=2)
    assert [s.n for s in dry.valid] == [1, 2] and dry.stopped == "ran dry after 3 candidates"
    broken = valid_scenes(ModuloBackend(), stream([1, 2, 4, 5], fail_after=2), 5, 50, batch=4)
    assert [s.n for s in broken.valid] == [1, 2]
    assert broken.stopped == "stopped after 2 candidates: the program cannot place object 'x'"
    enough = valid_scenes(ModuloBackend(), stream([1, 2, 4, 5], fail_after=2), 2, 50, batch=4)
    assert [s.n for s in enough.valid] == [1, 2] and enough.stopped == "" and enough.tries == 2


def test_invalid_repeats_are_checked_again_when_asked() -> None:
    backend = ModuloBackend()
    drawn = valid_scenes(backend, stream([3, 1, 3, 1, 2]), 2, 50, skip_invalid_repeats=True, batch=1)
    assert [s.n for s in drawn.valid] == [1, 2]
    assert backend.batches == [[3, 1], [3], [2]]  # the second 3 is checked again, the second 1 is not
