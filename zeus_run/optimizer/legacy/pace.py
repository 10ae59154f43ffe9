"""Pace apart from convergence: ``zeus-voi`` revision 5's model of an untried batch size's cost.

A recurrence's cost is the epochs it needs to reach the target times the cost of one
epoch. The two factors behave differently, and revision 5 predicts them apart:

**Epochs to the target** depend on the batch size and not on the machine. McCandlish et
al. (2018, "An Empirical Model of Large-Batch Training") find that the optimization steps
``S`` and training examples ``E`` to a target trade off as ``(S / Smin - 1)(E / Emin - 1) = 1``
with ``S = E / B``, so ``E = Emin (1 + B / Bnoise)``: with N examples per epoch,

    epochs(B) = a + k B,    a = Emin / N >= 0,   k = Emin / (N Bnoise) >= 0

(the steps form ``S = Smin (1 + Bnoise / B)`` is the same law). `EpochsFit` fits ``a`` and
``k`` by least squares to the epochs of every converged run seen so far, slow recurrences
included (a slow machine changes no epoch count). Below the critical batch size a
fixed learning rate can make small batches need *more* epochs than the law says; the fit's
residuals (against a prior relative spread) and a spread growing with the distance in log
batch size from the batch sizes it was fitted on carry that misfit into the prediction.

**Cost per epoch** (pace) depends on the machine and on how well a batch size fills it.
A smaller batch runs more, smaller iterations per epoch: at best as fast per epoch as the
larger batch, at worst each iteration as slow as the larger one's, i.e. ``B / b`` times the
larger batch's pace per epoch. So log pace against log batch size has a slope in [-1, 0].
`pace_prior` continues the slope between the two nearest measured paces on that side,
clamped to that range, and spreads it by `PACE_SLOPE_SD` per unit of log batch size
(or, from a single measured pace, the whole range: mean -1/2, sd ``1/sqrt(12)``, uniform).

Every function here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zeus_run.optimizer.legacy.voi import Estimate, LegacyVOIOptimizer, VOIState

#: Relative spread (sd of log epochs) of the law's fit assumed before its residuals say
#: otherwise, and its weight in pseudo-observations: runs of one configuration differ by 5-25%
#: in epochs to the target from their seed alone, and the law is an approximation on top of that.
#: (0.1 was tried on the tuning seeds too: docs/benchmarks.md.)
EPOCHS_PRIOR_SD = 0.2
EPOCHS_PRIOR_DOF = 2.0
#: Variance of an epoch count from its rounding to whole epochs (a run reaches the target during
#: an epoch and is counted at its end: uniform over one epoch; unit: epochs^2).
EPOCH_ROUNDING_VAR = 1.0 / 12.0
#: Further spread of log epochs per unit of log batch size away from the nearest batch size
#: the law was fitted on (the law holds near the data, less so far from it).
EPOCHS_DRIFT_SD = 0.15
#: Spread of the slope of log pace against log batch size around its continued value.
PACE_SLOPE_SD = 0.15
#: Slope of log pace against log batch size from a single measured pace: the middle of the
#: admissible range [-1, 0] and a uniform distribution's spread over it.
PACE_SLOPE_PRIOR = (-0.5, 1.0 / math.sqrt(12.0))


@dataclass(frozen=True)
class EpochsFit:
    """``epochs(B) = a + k B`` fitted to converged runs (see the module docstring).

    Attributes:
        a: Epochs at batch size 0 (``Emin / N``; >= 0).
        k: Epochs added per example of batch size (``Emin / (N Bnoise)``; >= 0).
        var: Relative variance of one run's epochs around the fit (its residuals against
            `EPOCHS_PRIOR_SD`).
        sxx: Sum of squared deviations of the runs' batch sizes from their mean (unit: examples^2).
        runs: Batch size -> its runs' mean epochs and count, for each batch size fitted on.
    """

    a: float
    k: float
    var: float
    sxx: float
    runs: Mapping[int, tuple[float, int]]

    def predict(self, batch_size: int) -> tuple[float, float]:
        """Mean and sd of log epochs to the target at ``batch_size``.

        The law gives the change from the nearest fitted batch size ``e``, the runs of ``e`` the
        level: ``epochs = mean_e + k (B - e)``. Where the runs contradict the law (epochs falling as
        the batch size grows, ``k`` clamped to 0) the prediction stays at ``e``'s level rather than
        at the fit's mean. Spread: ``e``'s mean, ``k``'s standard error times ``B - e`` (the
        regression's), and `EPOCHS_DRIFT_SD` per unit of log batch size from ``e``.
        """
        e = min(self.runs, key=lambda b: (abs(math.log(batch_size / b)), b))
        level, n = self.runs[e]
        epochs = max(level + self.k * (batch_size - e), 1e-9)
        # one run's variance in epochs^2 at e's level, and the rounding of a whole epoch count
        sigma2 = self.var * level * level + EPOCH_ROUNDING_VAR
        var = sigma2 / n / level**2 + sigma2 / self.sxx * (batch_size - e) ** 2 / epochs**2
        var += (EPOCHS_DRIFT_SD * math.log(batch_size / e)) ** 2
        return math.log(epochs), math.sqrt(var)

    @property
    def critical_batch_size(self) -> float:
        """``Bnoise = a / k`` (inf where epochs do not grow with the batch size)."""
        return math.inf if self.k <= 0 else self.a / self.k


def fit_epochs(epochs: Mapping[int, Sequence[float]]) -> EpochsFit | None:
    """Least-squares fit of ``epochs(B) = a + k B`` with ``a, k >= 0`` to each batch size's runs.

    Args:
        epochs: Batch size -> epochs to the target of each of its converged runs.

    Returns:
        The fit, or None where fewer than two batch sizes have a converged run (nothing to fit
        a law of the batch size on).
    """
    points = [(b, float(e)) for b, runs in sorted(epochs.items()) for e in runs if e > 0]
    sizes = sorted({b for b, _ in points})
    if len(sizes) < 2:
        return None
    n = len(points)
    mb = sum(b for b, _ in points) / n
    me = sum(e for _, e in points) / n
    sxx = sum((b - mb) ** 2 for b, _ in points)
    k = sum((b - mb) * (e - me) for b, e in points) / sxx
    a = me - k * mb
    if k < 0:  # epochs falling with the batch size: outside the law, its flat part fits best
        a, k = me, 0.0
    elif a < 0:  # through the origin
        a, k = 0.0, sum(b * e for b, e in points) / sum(b * b for b, _ in points)
    ss = sum(math.log(e / max(a + k * b, 1e-9)) ** 2 for b, e in points)
    var = (ss + EPOCHS_PRIOR_DOF * EPOCHS_PRIOR_SD**2) / (max(0, n - 2) + EPOCHS_PRIOR_DOF)
    runs = {}
    for b in sizes:
        mine = [e for c, e in points if c == b]
        runs[b] = (sum(mine) / len(mine), len(mine))
    return EpochsFit(a, k, var, sxx, runs)


def pace_prior(paces: Mapping[int, float], batch_size: int) -> tuple[float, float] | None:
    """Mean and sd of the log cost per epoch of an untried ``batch_size`` beyond the measured ones.

    Args:
        paces: Batch size -> its measured cost per epoch (unit: J per epoch).
        batch_size: A batch size outside the measured ones' range or between them.

    Returns:
        ``(mean, sd)`` of log pace, or None without any measured pace. The slope of log pace
        against log batch size continues from the nearest measured batch size ``e`` to ``b``
        along the slope between ``e`` and the next measured one beyond it on the same side,
        clamped to [-1, 0] (`PACE_SLOPE_SD` around it), or is `PACE_SLOPE_PRIOR` with only one.
    """
    known = sorted(b for b, p in paces.items() if p > 0)
    if not known:
        return None
    end = min(known, key=lambda b: (abs(math.log(batch_size / b)), b))
    beyond = [b for b in known if (b < end if batch_size > end else b > end)]
    dist = math.log(batch_size / end)
    if beyond:
        inner = max(beyond) if batch_size > end else min(beyond)
        slope = math.log(paces[end] / paces[inner]) / math.log(end / inner)
        slope, sd = min(0.0, max(-1.0, slope)), PACE_SLOPE_SD
    else:
        slope, sd = PACE_SLOPE_PRIOR
    return math.log(paces[end]) + slope * dist, sd * abs(dist)


def model_log_cost(
    epochs: Mapping[int, Sequence[float]], costs: Mapping[int, float], batch_size: int
) -> tuple[float, float] | None:
    """Mean and sd of the log cost of a converged run of an untried ``batch_size``: epochs x pace.

    Args:
        epochs: Batch size -> epochs of each of its converged runs (`fit_epochs`).
        costs: Batch size -> its estimated mean cost of a converged run (unit: J); its pace is
            that over its mean epochs.
        batch_size: The untried batch size.

    Returns:
        ``(mean, sd)``, or None where `fit_epochs` has too few batch sizes to fit.
    """
    fit = fit_epochs(epochs)
    if fit is None:
        return None
    paces = {b: c / (sum(epochs[b]) / len(epochs[b])) for b, c in costs.items() if epochs.get(b) and c > 0}
    pace = pace_prior(paces, batch_size)
    if pace is None:
        return None
    mu, sd = fit.predict(batch_size)
    return mu + pace[0], math.sqrt(sd * sd + pace[1] ** 2)


def model_prior(
    opt: LegacyVOIOptimizer,
    state: VOIState,
    est: Mapping[int, Estimate],
    batch_size: int,
    cv2: float,
    walk: tuple[float, float],
) -> tuple[float, float] | None:
    """Mean and sd of an untried batch size's log cost from epochs x pace (revision 5).

    `model_log_cost` on the epochs of the converged observations and each converged batch size's
    posterior mean cost, plus one trial's spread (``cv2``), pooled with the walk's prediction
    ``walk`` (`zeus_run.optimizer.LegacyVOIOptimizer.predict`: mean and sd of log cost) by precision.
    The two are not independent (both read the same costs), so the pooled sd is optimistic; the
    sensitivity table in docs/benchmarks.md compares it with the model alone. None while fewer than
    two batch sizes have converged: the walk's prediction stands (revision 4).
    """
    model = model_log_cost(state.epochs, {b: e.mean for b, e in est.items()}, batch_size)
    if model is None:
        return None
    mu, var = model[0], model[1] ** 2 + cv2
    wp, mp = 1.0 / walk[1] ** 2, 1.0 / var
    return (walk[0] * wp + mu * mp) / (wp + mp), math.sqrt(1.0 / (wp + mp))
