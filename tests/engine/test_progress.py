"""Learning progress, mode status and the generation-budget split (exact sums, |LP| proportions, floors)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coda.engine.progress import (
    EXPLORE,
    LearningProgress,
    ProgressError,
    allocate_budget,
    choose_modes,
    largest_remainder,
    mode_status,
)


def lp(mode: str, before: float, after: float, round: int = 1) -> LearningProgress:
    return LearningProgress(mode=mode, round=round, before=before, after=after)


def hist(mode: str, *pairs: tuple[float, float]) -> list[LearningProgress]:
    return [lp(mode, b, a, r + 1) for r, (b, a) in enumerate(pairs)]


def test_measure_from_probe_outcomes() -> None:
    p = LearningProgress.measure("m", 2, [True, False, False, False], [True, True, True, False])
    assert (p.before, p.after, p.n, p.progress) == (0.25, 0.75, 4, 0.5)
    with pytest.raises(ProgressError, match="after has 3 probe outcomes but before has 4"):
        LearningProgress.measure("m", 2, [True] * 4, [True] * 3)
    with pytest.raises(ProgressError, match="before: mode 'm' round 2 has no probe outcomes"):
        LearningProgress.measure("m", 2, [], [])


def test_mode_status() -> None:
    assert mode_status([]) == "active"
    assert mode_status(hist("m", (0.2, 0.5))) == "active"
    assert mode_status(hist("m", (0.6, 0.92))) == "solved"
    assert mode_status(hist("m", (0.6, 0.92)), solved_threshold=0.95) == "active"
    assert mode_status(hist("m", (0.2, 0.5), (0.5, 0.52))) == "active"  # one flat round is not k=2
    assert mode_status(hist("m", (0.2, 0.5), (0.5, 0.52), (0.52, 0.4))) == "stuck"  # a drop is no progress
    assert mode_status(hist("m", (0.5, 0.52), (0.52, 0.53)), stuck_rounds=3) == "active"
    assert mode_status(hist("m", (0.5, 0.52), (0.52, 0.53)), min_progress=0.0) == "active"
    with pytest.raises(ProgressError, match=r"history\[1\].round = 1 must come after round 1"):
        mode_status([lp("m", 0, 0.1), lp("m", 0.1, 0.2)])
    with pytest.raises(ProgressError, match=r"history\[1\].mode = 'x'"):
        mode_status([lp("m", 0, 0.1, 1), lp("x", 0.1, 0.2, 2)])
    with pytest.raises(ProgressError, match="stuck_rounds = 0"):
        mode_status([], stuck_rounds=0)


def test_budget_follows_absolute_progress() -> None:
    h = {"a": hist("a", (0.1, 0.2)), "b": hist("b", (0.1, 0.3)), "c": hist("c", (0.6, 0.3))}  # c forgot: |-0.3|
    out = allocate_budget(h, 600, 0.0, 0.0, 0.9, np.random.default_rng(0))
    assert out == {"a": 100, "b": 200, "c": 300, EXPLORE: 0}
    # with a floor: each mode first gets floor x rest, the remainder by |LP|
    out = allocate_budget(h, 1000, 0.2, 0.1, 0.9, np.random.default_rng(0))
    rest, free = 900, 900 * (1 - 3 * 0.2)
    assert out[EXPLORE] == 100
    for k, w in (("a", 1 / 6), ("b", 2 / 6), ("c", 3 / 6)):
        assert abs(out[k] - (0.2 * rest + free * w)) < 1


def test_solved_modes_retire_and_new_modes_get_the_floor() -> None:
    h = {"done": hist("done", (0.5, 0.95)), "learning": hist("learning", (0.2, 0.6)), "new": []}
    out = allocate_budget(h, 100, 0.1, 0.2, 0.9, np.random.default_rng(1))
    assert out["done"] == 0
    assert out[EXPLORE] == 20
    assert out["new"] == 8  # the floor of the modes' 80, nothing more: it has no progress yet
    assert out["learning"] == 72
    # nothing has history: equal shares
    out = allocate_budget({"x": [], "y": [], "z": []}, 90, 0.1, 0.0, 0.9, np.random.default_rng(1))
    assert out == {"x": 30, "y": 30, "z": 30, EXPLORE: 0}
    # every mode solved: the whole budget explores
    out = allocate_budget({"x": hist("x", (0.5, 1.0))}, 17, 0.1, 0.2, 0.9, np.random.default_rng(1))
    assert out == {"x": 0, EXPLORE: 17}


def test_capped_rounds_give_scenes_to_new_modes_first_then_by_progress() -> None:
    h = {"flat": hist("flat", (0.3, 0.3)), "gain": hist("gain", (0.1, 0.5)), "drop": hist("drop", (0.6, 0.4)),
         "new": [], "done": hist("done", (0.5, 0.95))}
    out = allocate_budget(h, 20, 0.1, 0.0, 0.9, np.random.default_rng(0), max_modes=2)
    assert out["new"] > 0 and out["gain"] > 0  # never measured, then the largest |progress|
    assert out["flat"] == out["drop"] == out["done"] == 0
    assert sum(out.values()) == 20
    assert choose_modes({k: v for k, v in h.items() if k != "done"}, 3, np.random.default_rng(0)) == ["drop", "gain", "new"]
    # no cap, or a cap at least the number of active modes: every active mode gets scenes, as before
    for cap in (0, 4, 9):
        out = allocate_budget(h, 20, 0.1, 0.0, 0.9, np.random.default_rng(0), max_modes=cap)
        assert out == allocate_budget(h, 20, 0.1, 0.0, 0.9, np.random.default_rng(0))
        assert all(out[k] > 0 for k in ("flat", "gain", "drop", "new"))
    # equal |progress|: which ones wait is drawn from the rng, the same for the same seed
    ties = {k: hist(k, (0.2, 0.4)) for k in "abcdef"}
    picks = {tuple(choose_modes(ties, 2, np.random.default_rng(s))) for s in range(20)}
    assert len(picks) > 1
    assert choose_modes(ties, 2, np.random.default_rng(3)) == choose_modes(ties, 2, np.random.default_rng(3))
    with pytest.raises(ProgressError, match=r"max_modes = -1 must be a non-negative integer"):
        allocate_budget(h, 20, 0.1, 0.0, 0.9, np.random.default_rng(0), max_modes=-1)


def test_budget_sums_exactly_over_random_inputs() -> None:
    rng = np.random.default_rng(123)
    for trial in range(400):
        n = int(rng.integers(0, 7))
        budget = int(rng.integers(0, 300))
        h: dict[str, list[LearningProgress]] = {}
        for i in range(n):
            rounds = int(rng.integers(0, 4))
            pts = [(float(rng.random()), float(rng.random())) for _ in range(rounds)]
            h[f"m{i}"] = hist(f"m{i}", *pts)
        active = [k for k, v in h.items() if not (v and v[-1].after >= 0.9)]
        floor = float(rng.uniform(0, 1 / max(1, len(active))))
        share = float(rng.random())
        out = allocate_budget(h, budget, floor, share, 0.9, np.random.default_rng(trial))
        assert sum(out.values()) == budget, (trial, out)
        assert set(out) == set(h) | {EXPLORE}
        assert all(isinstance(v, int) and v >= 0 for v in out.values())
        assert all(out[k] == 0 for k in h if k not in active)
        if active:
            assert abs(out[EXPLORE] - share * budget) < 1
            rest = budget - share * budget
            assert all(out[k] >= math.floor(floor * rest) for k in active), (trial, out)
        else:
            assert out[EXPLORE] == budget


def test_rounding_is_seeded_and_ties_are_fair() -> None:
    quotas = {"a": 1.5, "b": 1.5, "c": 1.5, "d": 1.5}
    first = largest_remainder(quotas, 6, np.random.default_rng(5))
    assert first == largest_remainder(quotas, 6, np.random.default_rng(5))
    assert sorted(first.values()) == [1, 1, 2, 2]
    winners = {tuple(sorted(k for k, v in largest_remainder(quotas, 6, np.random.default_rng(s)).items() if v == 2))
               for s in range(30)}
    assert len(winners) > 1  # ties are not always broken the same way


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"budget": -1}, "budget = -1 must be a non-negative integer"),
        ({"budget": 2.5}, "budget = 2.5"),
        ({"exploration_floor": 0.6}, r"exploration_floor = 0.6 is impossible for 2 active modes: 2 x 0.6 > 1"),
        ({"explore_share": 1.2}, "explore_share = 1.2 must be a number in"),
        ({"solved_threshold": 0.0}, "solved_threshold = 0.0"),
    ],
)
def test_bad_budget_inputs_name_the_field(kwargs: dict, match: str) -> None:
    args = {"progress_by_mode": {"a": [], "b": []}, "budget": 10, "exploration_floor": 0.1, "explore_share": 0.1,
            "solved_threshold": 0.9, "rng": np.random.default_rng(0)}
    args.update(kwargs)
    with pytest.raises(ProgressError, match=match):
        allocate_budget(**args)  # type: ignore[arg-type]


def test_unknown_or_misfiled_modes_fail() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ProgressError, match=r"progress_by_mode\['a'\]\[0\].mode = 'b' is not the mode it is listed under"):
        allocate_budget({"a": [lp("b", 0.1, 0.2)]}, 10, 0.1, 0.1, 0.9, rng)
    with pytest.raises(ProgressError, match="'explore' is reserved"):
        allocate_budget({EXPLORE: []}, 10, 0.1, 0.1, 0.9, rng)
    with pytest.raises(ValueError, match="after"):
        LearningProgress(mode="a", round=1, before=0.1, after=1.5)


def test_more_unsolved_modes_than_the_floor_allows_share_the_budget_evenly() -> None:
    from coda.config import CodaConfig
    from coda.engine.progress import mode_shares

    cfg = CodaConfig().engine.model_copy(update={"exploration_floor": 0.1, "max_modes": 0})
    active = {f"m{i}|task": [LearningProgress(mode=f"m{i}|task", round=1, before=0.0, after=0.2, n=1)] for i in range(12)}
    active["solved|task"] = [LearningProgress(mode="solved|task", round=1, before=0.5, after=0.95, n=1)]
    with pytest.raises(ProgressError, match="exploration_floor = 0.1 is impossible for 12 active modes"):
        allocate_budget(active, 26, 0.1, cfg.explore_share, cfg.solved_threshold, np.random.default_rng(0))
    shares = mode_shares(active, 26, cfg, np.random.default_rng(0))
    assert sum(shares.values()) == 26 and shares["solved|task"] == 0
    assert all(shares[f"m{i}|task"] in (1, 2) for i in range(12))
    # capped: three modes share the modes' part (never-measured first), the others wait
    capped = cfg.model_copy(update={"max_modes": 3})
    active["new|task"] = []
    shares = mode_shares(active, 26, capped, np.random.default_rng(0))
    chosen = {k for k, v in shares.items() if v and k != "explore"}
    assert sum(shares.values()) == 26 and len(chosen) == 3 and "new|task" in chosen
