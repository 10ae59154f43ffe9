"""zeus-voi's walk: the batch sizes it may probe next and their predicted costs (`candidates`).

The walk predicts the next batch size's cost beyond each end of the tried range by continuing the
last step's change in log cost (`predict_span`), and also weighs:

* **Strides.** Where the walk's own model says a descent goes on past the next step (the change it
  predicts for the step after next, `TREND` x the next step's, taken one standard deviation of the
  trend on the cautious side, still falls by more than `STEP_SD`), the batch size two steps on is a
  candidate too. A trend measured on two noisy costs is not enough: a slow or long single run makes
  a steep slope that is not there.
* **Gaps.** A batch size a stride skipped, predicted from each tried neighbour that has a trend (a
  converged batch size behind it), pooled by precision (all its converged neighbours when none has):
  a stride that overshot the best batch size lands on a rise with no trend behind it, and the
  neighbour it left from still predicts a fall into the gap.
* **The trend apart from noise** (`noisy_part`). A step's change in log cost is the change in log mean
  epochs plus the change in cost per epoch (pace). Pace is measured to a few percent by every run;
  epochs are whole numbers whose count varies by a seed's luck. The change in epochs counts only as
  far as it stands out of their noise (shrunk towards none as a posterior mean with a prior spread of
  `STEP_SD`), the change in pace whole.
* **Steady costs** (`without_sweep`, `overhead_share`). A batch size's first run also sweeps the GPUs'
  power limits; each run is learnt at its cost less what its sweep cost beyond the same work at the
  chosen limit (``profile_overhead`` on its record), and a probe is charged the overhead share its
  nearest batch size tried paid.

The candidates are valued in `zeus_run.optimizer.legacy.rev10.laws.best_probe`. Functions of the policy's face
(`zeus_run.optimizer.legacy.rev10.state.Policy`) and its state, pure as its fold is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping

from zeus_run.optimizer._base import Observation
from zeus_run.optimizer._stats import TINY, log_moments
from zeus_run.optimizer.legacy.rev10.state import Estimate, Policy, VOIState


def log_epochs(state: VOIState, est: Mapping[int, Estimate]) -> dict[int, float]:
    """Log mean epochs to the target of each converged batch size (the state's ``epochs``, by their running totals)."""
    return {b: math.log(total / n) for b, (total, n) in state.epoch_totals.items() if b in est and n}


def noisy_part(opt: Policy, est: Mapping[int, Estimate], epochs: Mapping[int, float], end: int, inner: int) -> float:
    """The part of the change in log epochs from ``inner`` to ``end`` (batch sizes) that is noise.

    ``(1 - s) x`` the change, with ``s = STEP_SD^2 / (STEP_SD^2 + v)`` and ``v`` the relative
    variance of the two mean costs: the change is shrunk towards 0 by ``s``. 0 where either
    batch size has no log epochs.
    """
    if end not in epochs or inner not in epochs:
        return 0.0
    v = sum(log_moments(est[b].mean, est[b].var)[1] for b in (end, inner))
    s = opt.STEP_SD**2 / (opt.STEP_SD**2 + v)
    return (1.0 - s) * (epochs[end] - epochs[inner])


def _log(e: Estimate) -> tuple[float, float]:
    """Log of an estimate's mean, and the variance of that log."""
    return log_moments(e.mean, e.var)


def predict_span(
    opt: Policy,
    est: Mapping[int, Estimate],
    end: int,
    step: int,
    cv2: float,
    steps: int = 1,
    epochs: Mapping[int, float] | None = None,
) -> tuple[float, float, float]:
    """Mean and sd of the log cost ``steps`` (1 or 2) batch sizes beyond ``end``, and the cautious trend.

    `ZeusVOIOptimizer.predict` where the tried batch sizes inside ``end`` may have gaps: the end's
    log cost is smoothed towards the line through the two nearest converged ones inside, and the
    trend is `TREND` times the change per step from the nearest one. With no gap and ``steps`` 1
    it is exactly that prediction. A further step continues `TREND` times the one before
    and adds `STEP_SD` of spread. The third value is the trend plus one standard deviation of it
    (from the two costs it is measured on; infinite without a trend): the largest change per step
    the costs support with some confidence, negative only for a sure descent.

    ``epochs`` (`log_epochs`): the log mean epochs of each
    converged batch size. The trend then takes the change in epochs between the two batch sizes it
    is measured on only as far as it stands out of their noise (`noisy_part`);
    the change in cost per epoch counts whole. The stride's test (the third value) takes the trend whole.
    """
    bs = opt.batch_sizes
    log_end, var_end = _log(est[bs[end]])
    inside = []  # the two nearest converged batch sizes inside ``end``
    for j in range(end - step, -1 if step > 0 else len(bs), -step):
        if bs[j] in est:
            inside.append(j)
            if len(inside) == 2:
                break
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
    opt: Policy, state: VOIState, est: Mapping[int, Estimate], cv2: float
) -> Iterator[tuple[int, str, tuple[float, float]]]:
    """Each batch size the walk may probe next: ``(batch size, why, (mean, sd) of its log cost)``.

    Downwards first, the next batch size beyond each end whose batch size
    reached the target, each followed by the one after it where the descent is sure to go on
    past the next step (the module docstring); then every untried batch size between two tried
    ones (a gap a stride left), predicted from its neighbours that have a trend (all of its
    converged neighbours when none has).
    """
    bs = opt.batch_sizes
    ep = log_epochs(state, est)
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


def without_sweep(state: VOIState, obs: Observation) -> tuple[VOIState, Observation]:
    """The observation at its steady cost (its sweep's overhead left out), and the state with the
    batch size's overhead share (overhead over steady cost) recorded; as they are without an overhead."""
    if obs.overhead <= 0:
        return state, obs
    steady = max(obs.cost - obs.overhead, TINY)
    shares = {**state.overheads, obs.batch_size: obs.overhead / steady}
    return dataclasses.replace(state, overheads=shares), dataclasses.replace(obs, cost=steady)


def overhead_share(opt: Policy, state: VOIState, batch_size: int) -> float:
    """The share of its steady cost that ``batch_size``'s first run will pay for its sweep: the share
    the nearest batch size with a recorded overhead paid (0 before any did)."""
    if not state.overheads:
        return 0.0
    i = opt.batch_sizes.index(batch_size)
    nearest = min(state.overheads, key=lambda b: (abs(opt.batch_sizes.index(b) - i), b))
    return state.overheads[nearest]
