"""Summaries of a history: per-recurrence rows, totals, and savings against the default."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Summary:
    """Totals of a history.

    Attributes:
        trials: Number of trial records.
        recurrences: Recurrences that converged.
        total_time, total_energy, total_cost: Sums over all trials (units: s, J, J).
        best_batch_size: Batch size with the lowest mean cost among converged trials.
        default_batch_size: b0, if known.
        default_mean_cost/energy/time: Mean over b0's own converged trials.
        baseline_cost/energy/time: What always running b0 would have cost for these recurrences.
        savings_cost/energy/time: ``1 - total / baseline`` (None without converged b0 trials).
        estimated: Whether energy figures are estimates.
        chosen: Batch size of the final trial of each recurrence, in order.
        after_time, after_energy: Time and energy the scripts spent after the point they were
            judged at (saving a model, winding down); not part of the totals or the cost (units: s, J).
    """

    trials: int
    recurrences: int
    total_time: float
    total_energy: float
    total_cost: float
    best_batch_size: int | None
    default_batch_size: int | None
    default_mean_cost: float | None = None
    default_mean_energy: float | None = None
    default_mean_time: float | None = None
    baseline_cost: float | None = None
    baseline_energy: float | None = None
    baseline_time: float | None = None
    savings_cost: float | None = None
    savings_energy: float | None = None
    savings_time: float | None = None
    estimated: bool = False
    chosen: tuple[int, ...] = field(default_factory=tuple)
    interrupted: int = 0
    after_time: float = 0.0
    after_energy: float = 0.0


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
                estimated=any(r.estimated for r in rs),
                stages=tuple(r.stage for r in rs),
            )
        )
    return rows


def summarize(records: Sequence[TrialRecord], default_batch_size: int | None = None) -> Summary:
    """Totals and savings against always running the default batch size.

    Args:
        records: The history.
        default_batch_size: b0; when None, the batch size of the first trial
            (zeus-run always starts there).
    """
    if default_batch_size is None and records:
        default_batch_size = records[0].batch_size
    rows = recurrence_rows(records)
    converged = [r for r in records if r.reached]
    by_bs: dict[int, list[float]] = defaultdict(list)
    for r in converged:
        by_bs[r.batch_size].append(r.cost)
    best = min(by_bs, key=lambda b: sum(by_bs[b]) / len(by_bs[b])) if by_bs else None
    total_cost = sum(r.spent_cost for r in records)
    total_energy = sum(r.energy for r in records)
    total_time = sum(r.time for r in records)
    n_rec = sum(1 for row in rows if row.reached)
    s = dict(
        trials=len(records),
        recurrences=n_rec,
        total_time=total_time,
        total_energy=total_energy,
        total_cost=total_cost,
        best_batch_size=best,
        default_batch_size=default_batch_size,
        estimated=any(r.estimated for r in records),
        chosen=tuple(row.final_batch_size for row in rows if row.reached),
        interrupted=sum(1 for r in records if r.stop_reason == "interrupted"),
        after_time=sum(r.after_time or 0.0 for r in records),
        after_energy=sum(r.after_energy or 0.0 for r in records),
    )
    base = [r for r in converged if r.batch_size == default_batch_size]
    if base and n_rec:
        for key, total in (("cost", total_cost), ("energy", total_energy), ("time", total_time)):
            mean = sum(getattr(r, key) for r in base) / len(base)
            baseline = mean * n_rec
            s[f"default_mean_{key}"] = mean
            s[f"baseline_{key}"] = baseline
            s[f"savings_{key}"] = 1.0 - total / baseline if baseline > 0 else None
    return Summary(**s)
