"""Where a run stands, derived from its records alone (`position`), and the best known batch size (`best_known`).

Pure functions over the history: the CLI, the engine's fallback rule and the tests all read them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from zeus_run.optimizer import Observation
from zeus_run.records import TrialRecord


@dataclass(frozen=True)
class Position:
    """Where a serial run stands, derived from its records.

    Attributes:
        recurrence: Recurrence to run next.
        attempt: Try number of the next trial within it.
        tries: Observed (counted) tries already spent on that recurrence.
        min_cost: Cheapest total cost of a converged recurrence (unit: J; inf if none).
        completed: Recurrences that reached the target.
        early_stops: Early stops (`zeus_run.contract.StopReason.early_stop`) already taken by that recurrence.
        converged: Per batch size, (sum of costs, count) of its converged trials.
        failed: Recurrences that failed: used up ``max_tries`` without the target
            (`zeus_run.records.TrialRecord.recurrence_failed`).
    """

    recurrence: int
    attempt: int
    tries: int
    min_cost: float
    completed: int
    early_stops: int = 0
    converged: dict[int, tuple[float, int]] = field(default_factory=dict)
    failed: int = 0

    @property
    def ended(self) -> int:
        """Recurrences that ended: reached the target or failed (what ``run --next`` counts past)."""
        return self.completed + self.failed


def position(records: Sequence[TrialRecord], max_tries: int | None = None) -> Position:
    """Derive the run's position from its records (pure; ``completed`` and ``failed`` are right for concurrent runs too).

    Args:
        records: The history, in the order it was folded.
        max_tries: The job's ``max_tries``: a recurrence recorded before failures were stamped
            fails on its ``max_tries``-th counted try, as `zeus_run.engine.ledger.Ledger` counts it.
            None: only stamped failures count.
    """
    min_cost = math.inf
    completed = 0
    rec, attempt, tries, acc, early = 1, 1, 0, 0.0, 0
    converged: dict[int, tuple[float, int]] = {}
    counted: dict[int, int] = {}  # observed tries per recurrence
    ended: set[int] = set()
    failed: set[int] = set()
    for r in records:
        if r.recurrence != rec:
            rec, tries, acc, early = r.recurrence, 0, 0.0, 0
        attempt = r.attempt + 1
        if r.observed:
            tries += 1
            acc += r.spent_cost
            early += r.stop_reason.early_stop
            counted[r.recurrence] = counted.get(r.recurrence, 0) + 1
            if r.reached:
                total, n = converged.get(r.batch_size, (0.0, 0))
                converged[r.batch_size] = (total + r.cost, n + 1)
        gave_up = r.observed and not r.reached and r.recurrence not in ended
        if gave_up and (
            r.recurrence_failed is not None or (max_tries is not None and counted[r.recurrence] >= max_tries)
        ):
            failed.add(r.recurrence)
            ended.add(r.recurrence)
            if r.recurrence == rec:
                rec, attempt, tries, acc, early = rec + 1, 1, 0, 0.0, 0
        if r.reached:
            completed += 1
            failed.discard(r.recurrence)
            ended.add(r.recurrence)
            min_cost = min(min_cost, acc)
            rec, attempt, tries, acc, early = rec + 1, 1, 0, 0.0, 0
    return Position(rec, attempt, tries, min_cost, completed, early, converged, len(failed))


def best_known(converged: dict[int, tuple[float, int]], default: int) -> int:
    """The batch size with the lowest mean cost among converged ones (ties: the smaller), or ``default``."""
    if not converged:
        return default
    return min(converged, key=lambda b: (converged[b][0] / converged[b][1], b))


def observation_of(record: TrialRecord) -> Observation | None:
    """What the optimizer learns from a trial, or None if it learns nothing.

    The one mapping from a record to an observation: records know nothing of the optimizer.
    """
    if not record.observed:
        return None
    return Observation(
        record.batch_size,
        record.cost,
        record.reached,
        record.probe is not False,
        record.epochs,
        overhead=record.profile_overhead or 0.0,
        power=power_share(record),
        estimated=estimated_share(record),
    )


#: Energy sources whose energy is a measurement of the GPUs (`power_share`).
MEASURED_GPU_ENERGY = ("nvml", "trace")


def estimated_share(record: TrialRecord) -> float:
    """How much of a trial's energy is an estimate, not a measurement: 1 for an estimate whole (the CPU estimate,
    an imputed or told figure), its ``estimated_share`` where only its start-up was (a script that measured
    itself), else 0."""
    if record.estimated_share is not None:
        return record.estimated_share
    return 1.0 if record.estimated else 0.0


def power_share(record: TrialRecord) -> float:
    """A trial's mean power over what its GPUs may draw: their limit in force (times their number), else the
    maximum the cost counts (``max_power``); 0 where the energy is not a measurement of the GPUs."""
    whole_estimate = record.estimated and record.estimated_energy is None  # (an estimated start-up alone: measured)
    if whole_estimate or record.energy_source not in MEASURED_GPU_ENERGY or record.time <= 0 or record.energy <= 0:
        return 0.0
    gpus = len((record.provenance or {}).get("gpus") or ()) or 1
    cap = gpus * record.power_limit if record.power_limit else record.max_power
    return record.energy / record.time / cap if cap > 0 else 0.0


def observations(records: Iterable[TrialRecord]) -> list[Observation]:
    """The optimizer's observations, in order."""
    return [o for o in (observation_of(r) for r in records) if o is not None]
