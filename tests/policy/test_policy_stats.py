"""Wilson score intervals."""

from __future__ import annotations

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
