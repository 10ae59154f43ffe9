"""A history's recurrences as rows, each its tries taken together, and a failed try's cause in one line."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeus_run.contract import crash_cause
from zeus_run.views.provenance import started

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord


@dataclass(frozen=True)
class RecurrenceRow:
    """One recurrence: its trials taken together.

    Attributes:
        recurrence: 1-based number.
        tries: Trials run (including interrupted ones).
        batch_sizes: Batch size of each trial, in order.
        final_batch_size: Batch size of the last trial.
        epochs: Epochs of all trials.
        time: Unit: s. energy: Unit: J. cost: Unit: J.
        reached: Whether the recurrence converged.
        outcomes: Stop reason of each trial.
        estimated: Whether any energy figure is an estimate.
        stages: Optimizer stage of each trial.
        reasons: Each trial's failure cause (`failure_reason`), None where it did not fail.
        power_limit: Power limit of the last trial (unit: W), if one was set.
        date: UTC date and time of day (``YYYY-MM-DD HH:MMZ``) of the recurrence's trigger, or of its first trial's start.
        stage: The recurrence's stage: its first try's (a fallback after an exploring try still explored).
    """

    recurrence: int
    tries: int
    batch_sizes: tuple[int, ...]
    final_batch_size: int
    epochs: int
    time: float
    energy: float
    cost: float
    reached: bool
    outcomes: tuple[str, ...]
    estimated: bool
    stages: tuple[str, ...] = ()
    reasons: tuple[str | None, ...] = ()
    power_limit: float | None = None
    date: str | None = None

    @property
    def stage(self) -> str:
        return self.stages[0] if self.stages else ""


def failure_reason(record: TrialRecord) -> str | None:
    """A failed trial's cause in one line, e.g. ``RuntimeError: CUDA out of memory`` (None: it did not fail).

    The record's ``cause`` (`zeus_run.contract.crash_cause`, written when the trial
    ended); for a record from before that field, the same rule applied to its message.
    """
    if not record.stop_reason.failure:
        return None
    return record.cause or crash_cause(record.stop_reason, record.message, record.exit_code)


def recurrence_rows(records: Sequence[TrialRecord]) -> list[RecurrenceRow]:
    """Group records by recurrence, in order."""
    groups: dict[int, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[r.recurrence].append(r)
    rows = []
    for rec in sorted(groups):
        rs = groups[rec]
        rows.append(
            RecurrenceRow(
                recurrence=rec,
                tries=len(rs),
                batch_sizes=tuple(r.batch_size for r in rs),
                final_batch_size=rs[-1].batch_size,
                epochs=sum(r.epochs for r in rs),
                time=sum(r.time for r in rs),
                energy=sum(r.energy for r in rs),
                cost=sum(r.spent_cost for r in rs),
                reached=any(r.reached for r in rs),
                outcomes=tuple(r.stop_reason for r in rs),
                estimated=any(r.estimated and r.estimated_energy is None for r in rs),  # an estimate whole
                stages=tuple(r.stage for r in rs),
                reasons=tuple(failure_reason(r) for r in rs),
                power_limit=rs[-1].power_limit,
                date=started(rs[0]),
            )
        )
    return rows
