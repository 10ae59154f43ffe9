"""The stop rule: when a trial is stopped, the one rule every door calls.

A trial is judged at each validated epoch (`StopRule.after_epoch`) and between
epochs (`StopRule.during`):

* the metric reaches the target (`zeus_run.contract.reaches_target`): ``target_reached``;
* it ran ``max_epochs`` epochs: ``max_epochs``;
* from the second epoch on, the cost after the next epoch would pass the
  threshold, the next epoch predicted to cost what **the last one** did:
  ``cost_threshold``;
* at any moment, the cost already passed the threshold (the hard cut), or the
  time passed ``timeout``: ``cost_threshold``, ``timeout``.

Why the last epoch and not the average: the first epoch carries the start-up
(interpreter, imports, data loading, compilation), which the next epoch does not
repeat. The average over the epochs so far charges that start-up to every
future epoch, so it cuts trials early, mostly at epochs 1-2 where start-up
weighs most, and it cuts the same trial at different epochs depending on how
slow the start-up was. The last epoch's cost is the marginal cost of going on.
Epoch 1 predicts nothing (it is all start-up as far as the rule knows); a trial
whose first epoch crosses the threshold is still stopped by the hard cut.

The launcher's trial runner (``zeus-run run`` and ``exec``), ``report_epoch``
(the server and ask/tell), the training-side helper when nothing else watches
the script (`zeus_run.train.Trial`, and through it the framework callbacks and
the Python `Job`), and ``tell`` (which re-reads a trial's epochs to find the
point it was judged at) all call this module. It imports only the standard
library and `zeus_run.contract` / `zeus_run.cost`, so the training side may import
it too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from zeus_run.contract import StopReason, TrialPlan, reaches_target


@dataclass(frozen=True)
class StopRule:
    """What a trial is held to.

    Attributes:
        max_epochs: Epoch limit.
        target_metric: Converged when the metric reaches this (None: never).
        higher_is_better: Direction of the metric.
        cost_threshold: Early-stop threshold (unit: J; inf: none).
        timeout: Wall-clock limit (unit: s), or None.
        curve_stop: Also stop once the learning curve cannot reach the target in time (a probe's, from
            ``zeus-voi`` revision 4: `zeus_run.optimizer.early_stop.cannot_reach`).
    """

    max_epochs: int
    target_metric: float | None
    higher_is_better: bool = True
    cost_threshold: float = math.inf
    timeout: float | None = None
    curve_stop: bool = False

    @classmethod
    def of_plan(cls, plan: TrialPlan) -> StopRule:
        """The rule a launched trial's plan states."""
        return cls(
            plan.max_epochs,
            plan.target_metric,
            plan.higher_is_better,
            plan.cost_threshold,
            plan.timeout,
            plan.curve_stop,
        )

    def reached(self, metric: float) -> bool:
        """Whether ``metric`` reaches the target."""
        return reaches_target(metric, self.target_metric, self.higher_is_better)

    def after_epoch(
        self, epoch: int, metric: float, cost: float, prev_cost: float, curve: Sequence[float] = ()
    ) -> StopReason | None:
        """Why to stop after a validated epoch, or None to go on.

        Args:
            epoch: The epoch just validated (1-based).
            metric: Its validation metric.
            cost: Cost since the trial began, at this epoch's end (unit: J).
            prev_cost: Cost at the previous epoch's end (unit: J; 0 for epoch 1).
            curve: The metrics of the epochs so far, this one included (for ``curve_stop``).
        """
        if self.reached(metric):
            return StopReason.TARGET_REACHED
        if epoch >= self.max_epochs:
            return StopReason.MAX_EPOCHS
        if epoch >= 2 and cost + (cost - prev_cost) > self.cost_threshold:
            return StopReason.COST_THRESHOLD
        if self.curve_stop and curve and self.target_metric is not None:
            from zeus_run.optimizer.early_stop import cannot_reach  # only here: the optimizer imports numpy

            if cannot_reach(
                list(curve),
                self.target_metric,
                self.max_epochs,
                higher_is_better=self.higher_is_better,
                cost=cost,
                threshold=self.cost_threshold,
            ):
                return StopReason.NO_PROGRESS
        return None

    def during(self, time: float, cost: float) -> StopReason | None:
        """Why to stop now, between epochs, or None: the timeout, or the cost already past the threshold.

        Args:
            time: Time since the trial began (unit: s).
            cost: Cost since the trial began (unit: J).
        """
        if self.timeout is not None and time > self.timeout:
            return StopReason.TIMEOUT
        if cost > self.cost_threshold:
            return StopReason.COST_THRESHOLD
        return None


@dataclass(frozen=True)
class Judged:
    """A trial's epochs read back through the rule: where it was judged (`judge`).

    Attributes:
        epochs: Epochs counted (up to and including the one it was judged at).
        reason: Why it was stopped, or None if the rule never stopped it.
        index: Index of the last counted epoch in the list given (-1: none).
    """

    epochs: int
    reason: StopReason | None
    index: int


def judge(rule: StopRule, points: list[tuple[float, float | None]]) -> Judged:
    """Run a finished trial's epochs through the rule, as if live (``tell`` of a trial nothing watched).

    Args:
        rule: The trial's rule.
        points: Per epoch, its metric and its cost since the trial began (unit: J; None
            where not known: then only the target and ``max_epochs`` apply).

    Returns:
        Where it was judged.
    """
    prev = 0.0
    for i, (metric, cost) in enumerate(points):
        epoch = i + 1
        curve = [m for m, _ in points[: i + 1]]
        if cost is None:
            reason = rule.after_epoch(epoch, metric, 0.0, 0.0, curve)
        else:
            reason = rule.after_epoch(epoch, metric, cost, prev, curve) or rule.during(0.0, cost)
            prev = cost
        if reason is not None:
            return Judged(epoch, reason, i)
    return Judged(len(points), None, len(points) - 1)
