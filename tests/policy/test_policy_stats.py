"""Wilson score intervals."""

from __future__ import annotations

import math

import pytest

from coda.errors import CodaError
from coda.policy.stats import wilson_interval


def test_known_values() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    lo, hi = wilson_interval(50, 50)
    assert hi == 1.0 and lo == pytest.approx(0.9287, abs=1e-4)


def test_bad_counts() -> None:
    with pytest.raises(CodaError, match="n = 0 must be >= 1"):
        wilson_interval(0, 0)
    with pytest.raises(CodaError, match=r"successes = 11 must be in \[0, 10\]"):
        wilson_interval(11, 10)


def test_mcnemar_p_matches_the_exact_binomial_test() -> None:
    from coda.policy.stats import mcnemar_p

    # 6 discordant pairs all one way: p = 2 * 0.5**6
    a = [True] * 6 + [True, False] * 5
    b = [False] * 6 + [True, False] * 5
    assert math.isclose(mcnemar_p(a, b), 2 * 0.5**6)
    # 3 against 1 discordant: p = 2 * P(X <= 1 | n=4) = 2 * 5/16
    assert math.isclose(mcnemar_p([True, True, True, False], [False, False, False, True]), 10 / 16)
    assert mcnemar_p([True, False], [True, False]) == 1.0  # no discordant pair: no evidence
    assert mcnemar_p([True] * 3000, [False] * 3000) < 1e-100  # summed in log space: no overflow
    with pytest.raises(CodaError, match="pairs must match"):
        mcnemar_p([True], [True, False])


def test_paired_difference_interval_covers_the_mean_and_shrinks_with_pairs() -> None:
    from coda.policy.stats import paired_difference

    a = [True] * 30 + [False] * 10
    b = [True] * 20 + [False] * 20
    r = paired_difference(a, b, seed=1)
    assert math.isclose(r["diff"], 0.25) and r["n"] == 40
    lo, hi = r["ci95"]
    assert lo < 0.25 < hi and 0.0 < lo  # 10 discordant pairs, all in a's favour
    few = paired_difference(a[15:25], b[15:25], seed=1)  # 5 of 10 pairs discordant
    assert few["diff"] == 0.5 and few["ci95"][1] - few["ci95"][0] > hi - lo
    assert paired_difference(a, b, seed=1) == r  # seeded
    same = paired_difference(a, a)
    assert same["diff"] == 0.0 and same["ci95"] == [0.0, 0.0] and same["p"] == 1.0
    with pytest.raises(CodaError, match="non-empty"):
        paired_difference([], [])
