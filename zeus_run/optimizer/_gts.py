"""Gaussian Thompson Sampling arithmetic: per-arm reward statistics and posteriors.

Each arm's reward (``-cost``) is modelled as Gaussian with an unknown mean and a
precision (inverse variance) *learned* from that arm's own, optionally windowed,
observations, as in the seeds' pruning GTS optimizer. The mean has a Gaussian
conjugate prior ``N(prior_mean, 1 / prior_precision)``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class ArmStats:
    """Running statistics of one arm's rewards.

    With ``window == 0`` all rewards count and are summarised by Welford's
    ``(n, mean, m2)``; with a window only the last ``window`` rewards count and
    are kept verbatim in ``recent``.
    """

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    recent: tuple[float, ...] = ()

    def add(self, reward: float, window: int) -> ArmStats:
        """Stats after one more reward."""
        if window > 0:
            return ArmStats(recent=((*self.recent, reward))[-window:])
        n = self.n + 1
        delta = reward - self.mean
        mean = self.mean + delta / n
        return ArmStats(n=n, mean=mean, m2=self.m2 + delta * (reward - mean))

    @property
    def count(self) -> int:
        """Number of rewards that count."""
        return len(self.recent) if self.recent else self.n

    def moments(self) -> tuple[int, float, float]:
        """``(count, mean, population variance)`` of the counted rewards."""
        if self.recent:
            import numpy as np  # here, not at import: a trigger whose policy keeps no window never loads numpy

            arr = np.asarray(self.recent, dtype=float)
            return len(arr), float(arr.mean()), float(arr.var())
        if self.n == 0:
            return 0, 0.0, 0.0
        return self.n, self.mean, max(self.m2 / self.n, 0.0)


def posterior(stats: ArmStats, prior_mean: float, prior_precision: float) -> tuple[float, float]:
    """Posterior ``(mean, precision)`` of an arm's mean reward.

    The reward precision is ``1 / variance`` of the arm's rewards. With a
    single reward (or identical ones) the variance is 0 and the precision
    infinite: the posterior collapses onto the observed mean, as in Zeus.

    Args:
        stats: The arm's rewards.
        prior_mean: Mean of the prior over the arm's mean reward.
        prior_precision: Precision of that prior (0: uninformative).
    """
    n, mean, var = stats.moments()
    if n == 0:
        return prior_mean, prior_precision
    if var == 0.0:
        return mean, math.inf
    reward_precision = 1.0 / var
    precision = prior_precision + n * reward_precision
    post_mean = (prior_precision * prior_mean + reward_precision * n * mean) / precision
    return post_mean, precision


def sample_means(rng: random.Random, posteriors: list[tuple[float, float]]) -> list[float]:
    """One Thompson draw per arm from ``N(mean, 1 / precision)`` (infinite precision: the mean).

    Plain Python: with the handful of arms a job has, this is several times
    faster than numpy's per-call overhead, and replay folds thousands of steps.
    """
    return [m if math.isinf(p) else rng.gauss(m, 1.0 / math.sqrt(p)) for m, p in posteriors]
