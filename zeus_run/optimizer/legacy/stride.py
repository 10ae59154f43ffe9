"""zeus-voi's stride (revision 7): a walk down a steep descent steps two batch sizes at once.

Revisions 2-6 walk one batch size per recurrence. Where b0 lies several steps from the best batch
size and the cost falls steeply, each step is a recurrence spent on a batch size that the trend
already says is not the best. Revision 7 also weighs the batch size two steps beyond an end of
the walk when the walk's own model says the descent goes on past the next step: the change it
predicts for the step after next (`TREND` x the next step's), taken one standard deviation of the
trend on the cautious side, still falls by more than `STEP_SD`, the spread of one step. A trend
measured on two noisy costs is not enough: a slow or long single run makes a steep slope that is
not there. Otherwise (no trend yet, a rising, flat or uncertain one) the candidates are revision
6's and so is the decision. The stride's probe is valued like any probe (`probe_value`, within
the budget), against the next batch size's.

A batch size a stride skipped is a gap, weighed like any probe too: its log cost is what the walk
predicts from a tried neighbour towards it (`predict_span`), from each neighbour that has a trend
(a converged batch size behind it), pooled by precision, as revision 6's second look pools its
neighbours (`neighbours`). A stride that overshot the best batch size lands on a rise with no
trend behind it yet, and the neighbour it left from still predicts a fall into the gap: the gap
is checked back as revision 6 would have probed it. Pooling in the trendless neighbour too (its
cost with no change) puts the gap between the two, above the lower one when the stride landed
on a cliff, and leaves the best batch size untried (`tests/optimizer/test_policy_voi.py`, and
docs/benchmarks.md for the measurements).

Functions of the optimizer (`zeus_run.optimizer.legacy.voi.LegacyVOIOptimizer`) and its state, pure as its fold is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from zeus_run.optimizer._base import Decision
from zeus_run.optimizer._stats import TINY, log_moments
from zeus_run.optimizer.legacy.overhead import overhead_share
from zeus_run.optimizer.legacy.trend import log_epochs, noisy_part

if TYPE_CHECKING:
    from zeus_run.optimizer.legacy.voi import Estimate, LegacyVOIOptimizer, VOIState


def _log(e: Estimate) -> tuple[float, float]:
    """Log of an estimate's mean, and the variance of that log."""
    return log_moments(e.mean, e.var)


def predict_span(
    opt: LegacyVOIOptimizer,
    est: Mapping[int, Estimate],
    end: int,
    step: int,
    cv2: float,
    steps: int = 1,
    epochs: Mapping[int, float] | None = None,
) -> tuple[float, float, float]:
    """Mean and sd of the log cost ``steps`` (1 or 2) batch sizes beyond ``end``, and the cautious trend.

    `LegacyVOIOptimizer.predict` where the tried batch sizes inside ``end`` may have gaps: the end's
    log cost is smoothed towards the line through the two nearest converged ones inside, and the
    trend is `TREND` times the change per step from the nearest one. With no gap and ``steps`` 1
    it is exactly revision 6's prediction. A further step continues `TREND` times the one before
    and adds `STEP_SD` of spread. The third value is the trend plus one standard deviation of it
    (from the two costs it is measured on; infinite without a trend): the largest change per step
    the costs support with some confidence, negative only for a sure descent.

    ``epochs`` (revision 8, `zeus_run.optimizer.legacy.trend.log_epochs`): the log mean epochs of each
    converged batch size. The trend then takes the change in epochs between the two batch sizes it
    is measured on only as far as it stands out of their noise (`zeus_run.optimizer.legacy.trend.noisy_part`);
    the change in cost per epoch counts whole. The stride's test (the third value) is revision 7's.
    """
    bs = opt.batch_sizes
    log_end, var_end = _log(est[bs[end]])
    inside = [j for j in range(end - step, -1 if step > 0 else len(bs), -step) if bs[j] in est][:2]
    if len(inside) == 2:
        (l1, _), (l2, _) = _log(est[bs[inside[0]]]), _log(est[bs[inside[1]]])
        k1, k2 = abs(end - inside[0]), abs(inside[0] - inside[1])
        line, var_line = l1 + (l1 - l2) * k1 / k2, opt.STEP_SD**2 * k1 + 2.0 * cv2
        precision = 1.0 / max(var_end, TINY) + 1.0 / var_line
        log_end = (log_end / max(var_end, TINY) + line / var_line) / precision
        var_end = 1.0 / precision
    trend, cautious = 0.0, math.inf
    if inside:
        l1, v1 = _log(est[bs[inside[0]]])
        k = abs(end - inside[0])
        trend = opt.TREND * (log_end - l1) / k
        cautious = trend + opt.TREND * math.sqrt(var_end + v1) / k
        if epochs is not None:
            trend -= opt.TREND * noisy_part(opt, est, epochs, bs[end], bs[inside[0]]) / k
    mu, change = log_end, trend
    for _ in range(steps):
        mu += change
        change *= opt.TREND
    return mu, math.sqrt(steps * opt.STEP_SD**2 + var_end + cv2), cautious


def candidates(
    opt: LegacyVOIOptimizer, state: VOIState, est: Mapping[int, Estimate], cv2: float
) -> Iterator[tuple[int, str, tuple[float, float]]]:
    """Each batch size the walk may probe next: ``(batch size, why, (mean, sd) of its log cost)``.

    In revision 6's order (downwards first) the next batch size beyond each end whose batch size
    reached the target, each followed by the one after it where the descent is sure to go on
    past the next step (the module docstring); then every untried batch size between two tried
    ones (a gap a stride left), predicted from its neighbours that have a trend (all of its
    converged neighbours when none has).
    """
    bs = opt.batch_sizes
    ep = log_epochs(state, est) if opt.revision >= 8 else None
    tried = [i for i, b in enumerate(bs) if b in state.arms]
    for side, end, step in (("downwards", min(tried), -1), ("upwards", max(tried), 1)):
        if not 0 <= end + step < len(bs) or bs[end] not in est:
            continue  # no batch size beyond, or this end never reached the target
        mu, sd, cautious = predict_span(opt, est, end, step, cv2, epochs=ep)
        yield bs[end + step], side, (mu, sd)
        if 0 <= end + 2 * step < len(bs) and opt.TREND * cautious < -opt.STEP_SD:
            mu2, sd2, _ = predict_span(opt, est, end, step, cv2, steps=2, epochs=ep)
            yield bs[end + 2 * step], f"{side}, two steps", (mu2, sd2)
    for i in range(1, len(bs) - 1):
        if bs[i] in state.arms or bs[i - 1] not in state.arms or bs[i + 1] not in state.arms:
            continue
        sides = [predict_span(opt, est, j, i - j, cv2, epochs=ep) for j in (i - 1, i + 1) if bs[j] in est]
        trended = [(m, sd) for m, sd, c in sides if math.isfinite(c)] or [(m, sd) for m, sd, _ in sides]
        if trended:
            precision = sum(1.0 / sd**2 for _, sd in trended)
            mu = sum(m / sd**2 for m, sd in trended) / precision
            yield bs[i], "the batch size a stride skipped", (mu, math.sqrt(1.0 / precision))


def best_stride(
    opt: LegacyVOIOptimizer,
    state: VOIState,
    est: Mapping[int, Estimate],
    leader: int,
    cv2: float,
    horizon: float | None = None,
) -> Decision | None:
    """Revision 7's `LegacyVOIOptimizer.best_probe`: the `candidates` worth probing most, if any is.

    Each is valued as revision 6 values a probe (`LegacyVOIOptimizer.probe_value` with its prediction,
    the chance that it converges), within the budget (`LegacyVOIOptimizer.within_budget`); ties go to
    the earlier candidate, as in revision 6.
    """
    p = opt.converge_chance(state)
    best: tuple[float, int, str] | None = None
    for batch_size, why, prior in candidates(opt, state, est, cv2):
        mu, sd = prior
        expected = math.exp(mu + sd * sd / 2.0)  # the probe's expected cost, were it to converge
        value = opt.probe_value(opt.batch_sizes, est, 0, 0, est[leader].mean, cv2, horizon, p, prior)
        value -= overhead_share(opt, state, batch_size) * expected  # its sweep (revision 9)
        if value > 0 and opt.within_budget(state, est, expected, p) and (best is None or value > best[0]):
            best = (value, batch_size, why)
    if best is None:
        return None
    value, batch_size, why = best
    return Decision(batch_size, "pruning", f"{why}: expected saving exceeds the probe's cost by {value:.4g} J")
