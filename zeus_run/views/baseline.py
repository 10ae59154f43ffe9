"""The default every saving is measured against: what the job ran before zeus-run.

That is the default batch size at the default power limit (the GPU's maximum, the
highest limit of the default batch size's power profile). `baseline` is the one
function that computes it; `zeus-run run`'s summary, ``history``, ``report``, ``plot``,
the exports and ``simulate`` all take their savings from it (through
`zeus_run.views.summary.summarize`), so they agree to the digit on one run directory.

How it is computed from a history:

* the default batch size's trials that reached the target, were observed, and did not
  run in a slow recurrence (`zeus_run.optimizer.early_stop`: the machine, not the batch
  size) are the runs it rests on, each without the power-limit sweep of a first run (`clean`:
  the default never swept);
* each run made at a lower power limit is scaled to the maximum limit through the
  profile (``time x throughput(limit) / throughput(max)``; energy by energy per unit of
  work, ``avg_power / throughput``); a run at the maximum, without a recorded limit, or
  at a limit the profile lacks is taken as it ran;
* the cost of each scaled run is the objective's cost of its scaled energy and time
  (``max-slowdown``: against the mean scaled time, the bound's own reference).

Without a profile (a CPU job, no power limits) the baseline is the default batch size's
mean as it ran. `zeus_run.views.saving` states every saving against it, with its interval.
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
        controls: How many of ``runs`` were control runs (`zeus_run.engine.control`).
        pace_from: The batch sizes the default's pace is also read from (`zeus_run.views.pace`; empty: none).
        pace_weight: Their line's weight in the default's cost pace (0-1).
    """

    batch_size: int
    power_limit: float | None
    runs: int
    scaled: int
    cost: float
    energy: float
    time: float
    controls: int = 0
    pace_from: tuple[int, ...] = ()
    pace_weight: float = 0.0

    @property
    def rests_on(self) -> str:
        """What the default's cost rests on, in words: ``the default ran 3 times (2 as controls); its pace is also
        read from 16's, 64's and 128's runs (weighing 40%)``."""
        ran = "once" if self.runs == 1 else f"{self.runs} times"
        out = f"the default ran {ran}"
        if self.controls:
            out += f" ({self.controls} as control{'s' if self.controls != 1 else ''})"
        if self.pace_from:
            names = [f"{b}'s" for b in self.pace_from]
            listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
            out += f"; its pace is also read from {listed} runs (weighing {self.pace_weight * 100:.0f}%)"
        return out

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


def clean(
    record: TrialRecord, objective: Objective | None = None, at: PowerLimitMeasurement | None = None
) -> tuple[float, float, float]:
    """``(cost, energy, time)`` of a converged run without its power-limit sweep (`TrialRecord.profile_overhead`).

    The sweep is what zeus-run paid to profile the limits in a batch size's first run; the
    batch size costs a run without it from then on, and the default never swept. The cost
    loses the sweep's price. Energy and time: with ``at`` (the profile's measurement at the
    run's limit) and an energy-time objective, the whole run at that limit's average power
    (``time = cost / (eta x power + (1 - eta) x max_power)``, ``energy = power x time``);
    otherwise each loses the sweep's share of the cost.
    """
    over = record.profile_overhead or 0.0
    if not (record.cost > 0 and 0.0 < over < record.cost):
        return record.cost, record.energy, record.time
    cost = record.cost - over
    if at is not None and at.avg_power > 0 and objective is not None and objective.kind != "max-slowdown":
        eta = objective.cost_eta
        rate = eta * at.avg_power + (1.0 - eta) * record.max_power
        if rate > 0:
            time = cost / rate
            return cost, at.avg_power * time, time
    keep = cost / record.cost
    return cost, record.energy * keep, record.time * keep


def default_samples(
    records: Sequence[TrialRecord],
    default_batch_size: int | None,
    *,
    objective: Objective | None = None,
    profile: Sequence[PowerLimitMeasurement] = (),
    slow: Collection[int] = (),
) -> tuple[int | None, float | None, int, list[tuple[float, float, float]]]:
    """b0's runs as the default would have run them: ``(b0, default limit, runs scaled, [(cost, energy, time)])``.

    Each of `default_runs`, without its sweep (`clean`), scaled to the default (maximum) limit
    through ``profile`` and re-costed by ``objective`` (see the module's docstring).
    """
    if default_batch_size is None and records:
        default_batch_size = records[0].batch_size
    runs = default_runs(records, default_batch_size, slow)
    by_limit = {m.power_limit: m for m in profile if m.throughput > 0 and m.avg_power > 0}
    top = by_limit[max(by_limit)] if by_limit else None
    cleaned = [
        (r, *clean(r, objective, by_limit.get(r.power_limit) if r.power_limit is not None else None)) for r in runs
    ]
    if top is None or objective is None:
        limit = None if top is None else top.power_limit
        return default_batch_size, limit, 0, [(c, e, t) for _, c, e, t in cleaned]
    scaled: list[tuple[TrialRecord, float, float]] = []
    moved = 0
    for r, _, e, t in cleaned:
        m = by_limit.get(r.power_limit) if r.power_limit is not None else None
        if m is None or m.power_limit == top.power_limit:
            scaled.append((r, e, t))
            continue
        moved += 1
        energy = e * (top.avg_power / top.throughput) / (m.avg_power / m.throughput)
        scaled.append((r, energy, t * m.throughput / top.throughput))
    ref = sum(t for _, _, t in scaled) / len(scaled) if scaled else None
    samples = [(objective.trial_cost(e, t, r.max_power, ref), e, t) for r, e, t in scaled]
    return default_batch_size, top.power_limit, moved, samples


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
    b0, limit, moved, samples = default_samples(
        records, default_batch_size, objective=objective, profile=profile, slow=slow
    )
    if not samples or b0 is None:
        return None
    n = len(samples)
    return Baseline(
        batch_size=b0,
        power_limit=limit,
        runs=n,
        scaled=moved,
        cost=sum(c for c, _, _ in samples) / n,
        energy=sum(e for _, e, _ in samples) / n,
        time=sum(t for _, _, t in samples) / n,
    )


def saving(value: float, baseline_value: float | None) -> float | None:
    """``1 - value / baseline_value`` (None without a positive baseline or a finite value)."""
    if baseline_value is None or baseline_value <= 0 or not math.isfinite(value):
        return None
    return 1.0 - value / baseline_value
