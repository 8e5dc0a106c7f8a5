"""Success statistics: Wilson score intervals for binomial success rates."""

from __future__ import annotations

import math

from coda.errors import CodaError

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval (lo, hi) for `successes` out of `n` trials (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is sensible at 0/n and n/n.

    Raises:
        CodaError: n < 1, or successes outside [0, n].
    """
    if n < 1:
        raise CodaError(f"wilson_interval: n = {n} must be >= 1")
    if not 0 <= successes <= n:
        raise CodaError(f"wilson_interval: successes = {successes} must be in [0, {n}]")
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # clamp away rounding at the extremes (0/n gives lo = 0 exactly in exact arithmetic)
    return max(0.0, centre - half), min(1.0, centre + half)


def success_summary(successes: list[bool]) -> dict[str, object]:
    """{"n", "success" (rate), "ci95": [lo, hi]} of a list of episode outcomes (Wilson 95% interval).

    Raises:
        CodaError: no outcomes.
    """
    n = len(successes)
    if n == 0:
        raise CodaError("success_summary: no episodes to summarise")
    k = sum(bool(s) for s in successes)
    lo, hi = wilson_interval(k, n)
    return {"n": n, "success": k / n, "ci95": [lo, hi]}
