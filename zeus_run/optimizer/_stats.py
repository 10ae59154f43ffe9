"""Small statistics helpers of the batch-size policies (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Iterable

_SQRT2 = math.sqrt(2.0)
#: Floor of a cost before its logarithm or a division (unit: J); a zero-cost trial is clamped to it.
TINY = 1e-12


def median(values: Iterable[float]) -> float:
    """Median of a non-empty collection."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def log_moments(mean: float, var: float) -> tuple[float, float]:
    """Log of a mean cost (floored at `TINY`) and the variance of that log (the relative variance)."""
    m = max(mean, TINY)
    return math.log(m), var / (m * m)


def normal_cdf(x: float) -> float:
    """Standard normal distribution function."""
    return 0.5 * math.erfc(-x / _SQRT2)


def lognormal_shortfall(mu: float, sd: float, target: float) -> float:
    """``E[max(0, target - C)]`` for ``log C ~ N(mu, sd^2)``: the expected improvement on ``target``."""
    if target <= 0.0:
        return 0.0
    if sd <= 0.0:
        return max(0.0, target - math.exp(mu))
    z = (math.log(target) - mu) / sd
    return target * normal_cdf(z) - math.exp(mu + sd * sd / 2.0) * normal_cdf(z - sd)
