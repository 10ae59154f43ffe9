"""zeus-voi's trend apart from noise (revision 8): a step's change in epochs counts as far as it stands out of their noise.

The walk predicts the next batch size's cost by continuing the last step's change in log cost
(`zeus_run.optimizer.legacy.stride.predict_span`). That change has two parts. The change in cost per
epoch (pace) is measured to a few percent by every run, whatever its epoch count. The change in
epochs to the target is not: epochs are whole numbers and one run's count varies by a seed's
luck (4 or 5 epochs is a 25% change in cost). Revisions 2-7 continue the sum. A single unlucky
count then reads as a rise that the walk extrapolates, and it stops before the batch sizes
beyond, however cheap they are.

Revision 8 splits the change in log cost between two batch sizes into the change in their log
mean epochs (over each one's converged runs) and the rest, the change in cost per epoch. It
continues the rest whole and the change in epochs shrunk towards none, as a posterior mean with
a prior spread of `LegacyVOIOptimizer.STEP_SD` (the spread of one step) and the noise of the two
batch sizes' mean costs (their posterior variance: one trial's pooled relative variance, shrunk
over each batch size's runs). A rise that is all in the epochs of one run each is mostly
discounted. A rise in pace (a smaller batch size filling the GPU less) is not. Where either
batch size has no converged run with its epochs (a run that reported none), the trend is
revision 7's.

Functions of the optimizer's state, pure as its fold is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from zeus_run.optimizer._stats import log_moments

if TYPE_CHECKING:
    from zeus_run.optimizer.legacy.voi import Estimate, LegacyVOIOptimizer, VOIState


def log_epochs(state: VOIState, est: Mapping[int, Estimate]) -> dict[int, float]:
    """Log mean epochs to the target of each converged batch size (the state's ``epochs``, by their running totals)."""
    return {b: math.log(total / n) for b, (total, n) in state.epoch_totals.items() if b in est and n}


def noisy_part(
    opt: LegacyVOIOptimizer, est: Mapping[int, Estimate], epochs: Mapping[int, float], end: int, inner: int
) -> float:
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
