"""Early stopping that knows what it is for: the paper's rule and the robust rule.

An early stop exists to abandon an exploration that cannot pay off. The paper's
rule (``paper``) cuts any trial whose cost would pass ``beta x`` the cheapest
converged recurrence ever, and the recurrence then tries again with whatever
the optimizer picks next. On a real machine a whole recurrence can run 1.5-3x
slower (a shared GPU or node, a slow file system, thermal throttling): then even
the best batch size passes the threshold, and the recurrence burns early stop
after early stop, each of them charged to a batch size for good.

The robust rule (``robust``, the default policy's) changes three things, each a
pure function of the history (replay and audit re-derive it exactly):

1. **A batch size that has reached the target is never cut**
   (`EarlyStopRule.threshold`). It is one of the bandit's arms: its cost is
   known within the bandit's spread, so a try of it costing ``beta x`` the best
   says more about the machine than about the arm, and cutting it saves nothing
   (the recurrence must still be run). Only explorations of batch sizes never
   seen to converge keep the paper's threshold, ``beta x`` the cheapest
   converged recurrence: that is what early stopping is for.
2. **One early stop per recurrence** (`EarlyStopRule.fallback_after`): after it
   the recurrence runs the batch size the optimizer believes best
   (`zeus_run.optimizer.BatchSizeOptimizer.leader`) without a threshold, so a
   slowdown costs at most one extra try.
3. **A slow recurrence is recorded as such and charged to no batch size**
   (`Pace`): an early stop teaches the optimizer nothing until its recurrence
   ends. If the try that ends it ran its epochs more than `SLOWDOWN` times
   slower than the same batch size's recent converged tries (median cost per
   epoch over `PACE_WINDOW`), the whole recurrence ran slow: its early stops
   are dropped from the optimizer's observations, and its own cost is taken at
   the usual pace (divided by the slowdown). The history keeps every record and
   the cost actually paid; `zeus-run history` lists the slow recurrences. A
   lasting change (a slower GPU from now on) moves the median within a few
   tries, after which it is the new normal.

**The learning-curve stop** (``curve``, ``zeus-voi`` revision 4). A probe of a batch size
that cannot reach the target still runs until its cost passes ``beta x`` the best, about
two recurrences' worth. The launcher sees each epoch's metric, so once a probe has run
`curve_min_epochs` epochs, `cannot_reach` extrapolates its curve: the best metric so far,
improved every remaining epoch by the largest one-epoch gain of the last `CURVE_WINDOW`
epochs. Learning curves flatten, so that straight line overestimates what the probe can
still reach; if even it stays short of the target within ``max_epochs`` (or within the
epochs its cost threshold still affords), the probe is stopped (`StopReason.NO_PROGRESS`,
an early stop like the threshold's). A pure function of the metrics seen.

Not done: telling GPU models apart under Slurm (the record's ``provenance`` has
them). The per-epoch median already absorbs a lasting change of hardware, and
arms per GPU model would multiply the exploration a short horizon can afford.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zeus_run.contract import StopReason
from zeus_run.cost import cost_threshold
from zeus_run.optimizer._stats import median as _median

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord

#: Stop reasons that count as an early stop (the cost threshold cut the trial, or it could not start under it).
EARLY_STOPS = tuple(r for r in StopReason if r.early_stop)
#: Early-stop rules (``zeus_run.optimizer.BatchSizeOptimizer.early_stop``).
RULES = ("paper", "robust")
#: A recurrence whose final try ran its epochs this many times slower than that batch size's median ran slow.
#: Real costs of one batch size per epoch vary by a few percent; the slowdowns worth catching are 1.5x and more.
SLOWDOWN = 1.3
#: Most recent converged tries per batch size the median cost per epoch is taken over.
PACE_WINDOW = 8
#: The learning-curve stop acts after at least this many epochs: two one-epoch gains to take a rate
#: from, and a third epoch to confirm it.
CURVE_MIN_EPOCHS = 3
#: ... and after at least this share of ``max_epochs``: a curve's first tenth says little about long
#: runs (a warm-up, a learning-rate schedule), and it is also the most a stop this early can cost.
CURVE_MIN_SHARE = 0.1
#: Recent epochs whose largest one-epoch gain the curve is extrapolated with.
CURVE_WINDOW = 3


def curve_min_epochs(max_epochs: int) -> int:
    """Epochs a probe runs before the learning-curve stop may act (`CURVE_MIN_EPOCHS`, `CURVE_MIN_SHARE`)."""
    return max(CURVE_MIN_EPOCHS, math.ceil(CURVE_MIN_SHARE * max_epochs))


def cannot_reach(
    metrics: Sequence[float],
    target: float,
    max_epochs: int,
    *,
    higher_is_better: bool = True,
    cost: float = 0.0,
    threshold: float = math.inf,
) -> bool:
    """Whether a trial's learning curve shows it will not reach ``target`` in time (see the module docstring).

    Args:
        metrics: The metric after each epoch so far.
        target: The target metric.
        max_epochs: Epochs a trial may run.
        higher_is_better: Direction of the metric.
        cost: Cost paid so far (unit: J).
        threshold: The trial's early-stop threshold (unit: J; inf: none). The epochs it still
            affords, at the mean cost per epoch so far, bound the epochs left.

    Returns:
        True only after `curve_min_epochs` epochs, when the best metric so far plus the largest
        one-epoch gain of the last `CURVE_WINDOW` epochs times the epochs left stays short of ``target``.
    """
    n = len(metrics)
    if n < curve_min_epochs(max_epochs) or any(math.isnan(m) for m in metrics):
        return False
    sign = 1.0 if higher_is_better else -1.0
    seen = [sign * m for m in metrics]
    best = max(seen)
    if best >= sign * target:
        return False
    left = max(0, max_epochs - n)
    if math.isfinite(threshold) and cost > 0:
        left = min(left, max(0, math.floor((threshold - cost) / (cost / n))))
    recent = seen[-(CURVE_WINDOW + 1) :]
    rate = max(0.0, *(b - a for a, b in itertools.pairwise(recent)))
    goal = sign * target
    return best + rate * left < goal - 1e-9 * max(1.0, abs(goal))  # a curve that just reaches it runs on


@dataclass(frozen=True)
class EarlyStopRule:
    """When a trial is cut, and how many cuts a recurrence takes before its fallback try.

    Attributes:
        name: ``paper`` or ``robust`` (see the module docstring).
        curve: Whether probes are also stopped by their learning curve (`cannot_reach`).
    """

    name: str = "paper"
    curve: bool = False

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise ValueError(f"unknown early-stop rule {self.name!r}; known: {', '.join(RULES)}")

    @property
    def robust(self) -> bool:
        return self.name == "robust"

    def threshold(self, beta: float | None, min_cost: float, batch_size: int, converged: Container[int]) -> float:
        """Early-stop threshold of a trial of ``batch_size`` (unit: J; inf: none).

        Args:
            beta: Early-stop knob (None: off).
            min_cost: Cheapest converged recurrence so far (unit: J; inf if none).
            batch_size: The batch size the trial runs.
            converged: Batch sizes that have reached the target before (the bandit's arms).
        """
        if self.robust and batch_size in converged:
            return math.inf
        return cost_threshold(beta, min_cost)

    def fallback_after(self, max_early_stops: int | None) -> int | None:
        """Early stops a recurrence takes before its fallback try (None: never, the paper's semantics)."""
        if not self.robust:
            return max_early_stops
        return 1 if max_early_stops is None else min(1, max_early_stops)


@dataclass
class Pace:
    """Cost per epoch of each batch size's converged tries: tells a slow recurrence from a bad batch size.

    Attributes:
        per_epoch: Batch size -> the recent converged tries' cost per epoch.
        measure: A try's cost without what the objective adds for the whole run (``max-slowdown``'s
            penalty grows with the number of epochs, so it is no pace: `zeus_run.objective.SlowdownCharge.pace_cost`);
            None: the record's cost.
    """

    per_epoch: dict[int, list[float]] = field(default_factory=dict)
    measure: Callable[[TrialRecord], float] | None = None

    def _cost(self, record: TrialRecord) -> float:
        return record.cost if self.measure is None else self.measure(record)

    def slowdown(self, record: TrialRecord) -> float:
        """How many times slower than its batch size's median ``record`` ran its epochs.

        1.0 (no evidence) without history, or when its epochs were not timed (read in one
        burst at the script's exit: ``TrialRecord.epoch_timing``).
        """
        past = self.per_epoch.get(record.batch_size)
        if not past or record.epochs <= 0 or not record.epochs_timed:
            return 1.0
        median = _median(past)  # the same arithmetic as statistics.median, without its overhead
        return self._cost(record) / record.epochs / median if median > 0 else 1.0

    def add(self, record: TrialRecord) -> None:
        """Learn from a converged try (one whose epochs were not timed teaches no pace)."""
        cost = self._cost(record)
        if record.epochs > 0 and math.isfinite(cost) and record.epochs_timed:
            past = self.per_epoch.setdefault(record.batch_size, [])
            past.append(cost / record.epochs)
            del past[:-PACE_WINDOW]
