"""Success statistics: Wilson score intervals for binomial success rates, and paired differences of two
strategies on the same scenes (paired bootstrap interval, exact McNemar test)."""

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


def mcnemar_p(a: list[bool], b: list[bool]) -> float:
    """Two-sided exact McNemar p-value for paired outcomes (a[i], b[i]) of the same scenes: the binomial
    test of the discordant pairs (a right, b wrong: n_ab; the reverse: n_ba) against an even split.

    Raises:
        CodaError: the lists differ in length.
    """
    if len(a) != len(b):
        raise CodaError(f"mcnemar_p: {len(a)} outcomes against {len(b)}; pairs must match one to one")
    n_ab = sum(bool(x) and not bool(y) for x, y in zip(a, b))
    n_ba = sum(bool(y) and not bool(x) for x, y in zip(a, b))
    n = n_ab + n_ba
    if n == 0:
        return 1.0
    k = min(n_ab, n_ba)
    # P(X <= k) for X ~ Binomial(n, 1/2), summed in log space (n may be in the thousands)
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2.0) for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top) * sum(math.exp(x - top) for x in logs)
    return min(1.0, 2.0 * tail)


def paired_difference(a: list[bool], b: list[bool], *, resamples: int = 2000, seed: int = 0) -> dict[str, object]:
    """Mean of a − b over paired outcomes of the same scenes, with a paired bootstrap 95% interval (pairs
    resampled together, seeded) and the exact McNemar p-value: {"diff", "ci95": [lo, hi], "p", "n"}.

    Raises:
        CodaError: the lists differ in length or are empty.
    """
    import numpy as np

    if len(a) != len(b) or not a:
        raise CodaError(f"paired_difference: {len(a)} outcomes against {len(b)}; need matching, non-empty pairs")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"diff": float(d.mean()), "ci95": [float(lo), float(hi)], "p": mcnemar_p(a, b), "n": len(d)}
