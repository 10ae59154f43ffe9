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

Not done: telling GPU models apart under Slurm (the record's ``provenance`` has
them). The per-epoch median already absorbs a lasting change of hardware, and
arms per GPU model would multiply the exploration a short horizon can afford.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zeus_run.contract import StopReason
from zeus_run.cost import cost_threshold

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


@dataclass(frozen=True)
class EarlyStopRule:
    """When a trial is cut, and how many cuts a recurrence takes before its fallback try.

    Attributes:
        name: ``paper`` or ``robust`` (see the module docstring).
    """

    name: str = "paper"

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
    """Cost per epoch of each batch size's converged tries: tells a slow recurrence from a bad batch size."""

    per_epoch: dict[int, list[float]] = field(default_factory=dict)

    def slowdown(self, record: TrialRecord) -> float:
        """How many times slower than its batch size's median ``record`` ran its epochs (1.0: no history)."""
        past = self.per_epoch.get(record.batch_size)
        if not past or record.epochs <= 0:
            return 1.0
        median = statistics.median(past)
        return record.cost / record.epochs / median if median > 0 else 1.0

    def add(self, record: TrialRecord) -> None:
        """Learn from a converged try."""
        if record.epochs > 0 and math.isfinite(record.cost):
            past = self.per_epoch.setdefault(record.batch_size, [])
            past.append(record.cost / record.epochs)
            del past[:-PACE_WINDOW]
