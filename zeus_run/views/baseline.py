"""The default every saving is measured against: what the job ran before zeus-run.

That is the default batch size at the default power limit (the GPU's maximum, the
highest limit of the default batch size's power profile). `baseline` is the one
function that computes it; `zeus-run run`'s summary, ``history``, ``report``, ``plot``,
the exports and ``simulate`` all take their savings from it (through
`zeus_run.views.summary.summarize`), so they agree to the digit on one run directory.

How it is computed from a history:

* the default batch size's trials that reached the target, were observed, and did not
  run in a slow recurrence (`zeus_run.optimizer.early_stop`: the machine, not the batch
  size) are the runs it rests on;
* each run made at a lower power limit is scaled to the maximum limit through the
  profile (``time x throughput(limit) / throughput(max)``; energy by energy per unit of
  work, ``avg_power / throughput``); a run at the maximum, without a recorded limit, or
  at a limit the profile lacks is taken as it ran;
* the cost of each scaled run is the objective's cost of its scaled energy and time
  (``max-slowdown``: against the mean scaled time, the bound's own reference).

Without a profile (a CPU job, no power limits) the baseline is the default batch size's
mean as it ran.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zeus_run.objective import Objective
    from zeus_run.records import PowerLimitMeasurement, TrialRecord


@dataclass(frozen=True)
class Baseline:
    """One recurrence of the job as it ran before zeus-run (means over the default's runs).

    Attributes:
        batch_size: The default batch size.
        power_limit: The default power limit (unit: W), None where no profile names one.
        runs: Converged runs of the default the means rest on.
        scaled: How many of them ran at another limit and were scaled to ``power_limit``.
        cost: Mean cost of a recurrence (unit: J).
        energy: Mean energy of a recurrence (unit: J).
        time: Mean time of a recurrence (unit: s).
    """

    batch_size: int
    power_limit: float | None
    runs: int
    scaled: int
    cost: float
    energy: float
    time: float

    def saving(self, quantity: str, total: float, recurrences: int) -> float | None:
        """``1 - total / (recurrences x mean)`` of ``quantity`` (``cost``, ``energy``, ``time``); None if undefined."""
        return saving(total, getattr(self, quantity) * recurrences)


def default_runs(
    records: Sequence[TrialRecord], default_batch_size: int | None, slow: Collection[int] = ()
) -> list[TrialRecord]:
    """The default batch size's runs a baseline rests on: reached, observed, not in a slow recurrence."""
    return [
        r
        for r in records
        if r.batch_size == default_batch_size and r.reached and r.observed and r.recurrence not in slow
    ]


def baseline(
    records: Sequence[TrialRecord],
    default_batch_size: int | None,
    *,
    objective: Objective | None = None,
    profile: Sequence[PowerLimitMeasurement] = (),
    slow: Collection[int] = (),
) -> Baseline | None:
    """The default's recurrence, scaled to the default (maximum) power limit.

    Args:
        records: The history.
        default_batch_size: b0 (None: the first record's batch size; zeus-run starts there).
        objective: What the job's cost charges; needed to re-cost a scaled run (None: runs are
            taken as they ran).
        profile: The default batch size's power profile (`zeus_run.engine.knobs.Knobs.default_profile`).
        slow: Slow recurrences (left out).

    Returns:
        None before the default has converged outside a slow recurrence.
    """
    if default_batch_size is None and records:
        default_batch_size = records[0].batch_size
    runs = default_runs(records, default_batch_size, slow)
    if not runs or default_batch_size is None:
        return None
    by_limit = {m.power_limit: m for m in profile if m.throughput > 0 and m.avg_power > 0}
    top = by_limit[max(by_limit)] if by_limit else None
    if top is None or objective is None:
        return _mean_of(default_batch_size, None if top is None else top.power_limit, runs, 0, None)
    scaled: list[tuple[TrialRecord, float, float]] = []
    moved = 0
    for r in runs:
        m = by_limit.get(r.power_limit) if r.power_limit is not None else None
        if m is None or m.power_limit == top.power_limit:
            scaled.append((r, r.energy, r.time))
            continue
        moved += 1
        time = r.time * m.throughput / top.throughput
        energy = r.energy * (top.avg_power / top.throughput) / (m.avg_power / m.throughput)
        scaled.append((r, energy, time))
    ref = sum(t for _, _, t in scaled) / len(scaled)
    costs = [objective.trial_cost(e, t, r.max_power, ref) for r, e, t in scaled]
    return _mean_of(default_batch_size, top.power_limit, scaled, moved, costs)


def _mean_of(
    batch_size: int,
    power_limit: float | None,
    runs: Sequence[TrialRecord] | Sequence[tuple[TrialRecord, float, float]],
    moved: int,
    costs: Sequence[float] | None,
) -> Baseline:
    rows = [(r, r.energy, r.time) if not isinstance(r, tuple) else r for r in runs]
    n = len(rows)
    cost = sum(costs) / n if costs is not None else sum(r.cost for r, _, _ in rows) / n
    return Baseline(
        batch_size=batch_size,
        power_limit=power_limit,
        runs=n,
        scaled=moved,
        cost=cost,
        energy=sum(e for _, e, _ in rows) / n,
        time=sum(t for _, _, t in rows) / n,
    )


def saving(value: float, baseline_value: float | None) -> float | None:
    """``1 - value / baseline_value`` (None without a positive baseline or a finite value)."""
    if baseline_value is None or baseline_value <= 0 or not math.isfinite(value):
        return None
    return 1.0 - value / baseline_value
