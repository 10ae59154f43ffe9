"""``zeus-voi`` revision 11 (opt-in): a warm start that moves what is the job's and re-measures what is the GPU's.

Revision 11 is revision 10 (`zeus_run.optimizer.legacy.rev10.policy`) with one stage replaced: how a warm start prices
the batch sizes its source ran (`TransferVOIOptimizer.warm_candidates`). Cold, the two decide alike.

A recurrence's cost is its epochs to the target times the cost of one epoch (its pace). The epochs a
batch size needs are the job's: the same on any GPU (model, data, batch size, learning rate). The pace
and power of an epoch at each batch size are the GPU's. Revision 10 predicted a batch size's cost here
as its cost in the source times the ratio of costs here and there at the batch sizes run in both: that
carries over the source GPU's pace curve with the epochs, and where the two GPUs' paces bend apart (one
saturates at a smaller batch size than the other) the ratio between two batch sizes does not carry over.

Revision 11 predicts an untried batch size's log cost here as

    log epochs(b) + log pace_here(b)

* **epochs(b)**: the mean of its runs to the target, here and in the source together (`zeus_run.optimizer.legacy.rev10.warm.epochs`),
  with the epoch counts' pooled noise (`zeus_run.optimizer.legacy.rev10.laws.pooled_noise`) over their number; a
  batch size on the walk's grid between two that converged in the source is read on the straight line
  of log epochs between them (spread `EPOCHS_SD` per doubling, a Brownian bridge).
* **pace_here(b)**: each converged batch size here gives its pace here (its cost estimate over its
  epochs here, never the source's). Between two, the log pace is interpolated (a bridge of `PACE_SD`
  per doubling). Beyond them it is continued from the nearest one measured here: by the change of the
  source's pace between that batch size and ``b`` where the source ran both to the target (the shape
  of a pace curve, anchored at a level measured here), else along the slope of the two nearest
  measured here, clipped to the law of pace (`pace(B) = alpha + beta / B`: at most proportionally
  faster as the batch grows; up to `RISE` per doubling slower where padding or memory traffic break
  it), else flat; the spread grows by `PACE_SD` per doubling (a random walk). The source's level of
  pace and its power never enter.

Which batch sizes never converged in the source still counts (`zeus_run.optimizer.legacy.rev10.warm.converge_chance`), and its epochs
still join the laws' fits. What the issue also asks and this revision does not do: stop a probe after
its first epoch when its epochs times that epoch's pace pass the best cost (it needs the projected
epochs carried through the trial's contract to every launcher's stop rule); a probe still runs until
``beta`` times the best.

Functions of the policy's state, pure as its fold is, and the policy (`TransferVOIOptimizer`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from zeus_run.optimizer._stats import median as _median
from zeus_run.optimizer.legacy.rev10.laws import pooled_noise
from zeus_run.optimizer.legacy.rev10.policy import ZeusVOIOptimizer
from zeus_run.optimizer.legacy.rev10.warm import epoch_logs as warm_epoch_logs
from zeus_run.optimizer.legacy.rev10.warm import epochs as warm_epochs

if TYPE_CHECKING:
    from zeus_run.optimizer.legacy.rev10.state import Estimate, Policy, VOIState

#: This revision (`zeus_run.spec.OptimizerSettings.revision`).
REVISION = 11

#: How far the log pace wanders per doubling of the batch size away from the batch sizes measured here:
#: the law bounds a doubling's change of log pace to [-ln 2, 0], whose uniform spread is ln 2 / sqrt(12) = 0.2.
PACE_SD = 0.2
#: Most a doubling of the batch size may slow an epoch in the continuation (log pace per doubling): the
#: law's zero, plus what padding and memory traffic add on the shared traces' worst pair (librispeech a40:
#: 128 -> 192, +0.35 per doubling) halved: a continuation is a guess, the runs correct it.
RISE = 0.2
#: Spread of log epochs per doubling between two batch sizes whose epochs the source measured.
EPOCHS_SD = 0.1
#: The continuation's slope of log pace per doubling with one batch size measured here and nothing from the source
#: on that stretch: none (the pace here is unknown until measured; `PACE_SD` says how unknown).
FLAT = 0.0


def _log_mean(runs: Sequence[int]) -> float:
    return math.log(sum(runs) / len(runs))


def log_epochs(seen: Mapping[int, tuple[int, int]], var1: float, b: int) -> tuple[float, float] | None:
    """Mean and variance of the log of ``b``'s mean epochs to the target (None: no converged size around it).

    Args:
        seen: Per batch size, the sum and count of its converged runs' epochs (`zeus_run.optimizer.legacy.rev10.warm.epochs`).
        var1: The noise of one run's log epochs.
        b: The batch size.
    """
    runs = {c: (total, n) for c, (total, n) in seen.items() if n > 0 and total > 0}
    if b in runs:
        total, n = runs[b]
        return math.log(total / n), var1 / n
    below = [c for c in runs if c < b]
    above = [c for c in runs if c > b]
    if not below or not above:
        return None
    lo, hi = max(below), min(above)
    d1, d2 = math.log2(b / lo), math.log2(hi / b)
    w = d1 / (d1 + d2)
    (t_lo, n_lo), (t_hi, n_hi) = runs[lo], runs[hi]
    mean = (1.0 - w) * math.log(t_lo / n_lo) + w * math.log(t_hi / n_hi)
    var = (1.0 - w) ** 2 * var1 / n_lo + w**2 * var1 / n_hi + EPOCHS_SD**2 * d1 * d2 / (d1 + d2)
    return mean, var


def log_pace(
    paces: Mapping[int, tuple[float, float]], b: int, prior: Mapping[int, float] | None = None
) -> tuple[float, float]:
    """Mean and variance of ``b``'s log pace here, from the log paces measured here (``paces``, non-empty) and the
    source's log paces (``prior``: only their changes count; see the module docstring)."""
    below = sorted(c for c in paces if c < b)
    above = sorted(c for c in paces if c > b)
    if below and above:
        lo, hi = below[-1], above[0]
        d1, d2 = math.log2(b / lo), math.log2(hi / b)
        w = d1 / (d1 + d2)
        mean = (1.0 - w) * paces[lo][0] + w * paces[hi][0]
        var = (1.0 - w) ** 2 * paces[lo][1] + w**2 * paces[hi][1] + PACE_SD**2 * d1 * d2 / (d1 + d2)
        return mean, var
    near = below[-1] if below else above[0]
    inner = below[-2] if below and len(below) > 1 else (above[1] if above and len(above) > 1 else None)
    slope = FLAT
    if prior and near in prior and b in prior:
        slope = (prior[b] - prior[near]) / math.log2(b / near)
    elif inner is not None:
        slope = (paces[near][0] - paces[inner][0]) / math.log2(near / inner)
        slope = min(max(slope, -math.log(2.0)), RISE)
    d = math.log2(b / near)
    return paces[near][0] + slope * d, paces[near][1] + PACE_SD**2 * abs(d)


def candidates(
    opt: Policy,
    state: VOIState,
    est: Mapping[int, Estimate],
    cv2: float,
    grid: Sequence[int] = (),
) -> Iterator[tuple[int, str, tuple[float, float]]]:
    """Each untried batch size the source ran to the target, or on the walk's ``grid`` between two it did, with the
    mean and sd of its log cost here: its epochs (carried over) times its pace here (see the module docstring)."""
    if not state.warm:
        return  # a cold start: revision 10's walk, unchanged
    seen = warm_epochs(state)
    var1 = pooled_noise(warm_epoch_logs(state))
    paces = {}
    for a, e in est.items():  # each converged batch size's pace here: its cost here over its epochs here
        total, n = state.epoch_totals.get(a, (0, 0))
        if n and total > 0 and e.mean > 0:
            paces[a] = (math.log(e.mean) - math.log(total / n), e.var / e.mean**2)
    if not paces:
        return
    there = {}  # the source's log pace at each batch size it ran to the target: its shape, not its level
    for c, r in state.warm.items():
        if r.costs and r.epochs:
            there[c] = math.log(_median(r.costs)) - _log_mean(r.epochs)
    for b in opt.batch_sizes:
        if b in state.arms:
            continue
        runs = state.warm.get(b)
        own = runs is not None and bool(runs.epochs)
        if not own and b not in grid:
            continue  # between the source's batch sizes only on the walk's steps
        epochs = log_epochs(seen, var1, b)
        if epochs is None:
            continue
        pace = log_pace(paces, b, there)
        why = (
            f"warm: it reached the target in the source, {runs.reached} of {runs.tried} runs"
            if own and runs is not None
            else "warm: between batch sizes that reached the target in the source"
        )
        yield b, why, (epochs[0] + pace[0], math.sqrt(epochs[1] + pace[1] + cv2))


class TransferVOIOptimizer(ZeusVOIOptimizer):
    """``zeus-voi`` revision 11: revision 10 whose warm start prices a batch size as its epochs carried over times its
    pace here (`candidates`). Opt-in (``optimizer: {revision: 11}``); the default stays revision 10."""

    revision = REVISION

    def warm_candidates(
        self, state: VOIState, est: Mapping[int, Estimate], cv2: float, grid: Sequence[int]
    ) -> Iterator[tuple[int, str, tuple[float, float]]]:
        """Revision 11's warm candidates (`candidates`)."""
        return candidates(self, state, est, cv2, grid)
