"""What a simulated run is measured against: the Default, the Oracle and grid search, from a job's traces."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from zeus_run.objective import Objective
from zeus_run.sim._traces import JobTable


def epoch_costs(table: JobTable, eta: float) -> np.ndarray:
    """``[bs, pl]`` cost of one epoch (unit: J; NaN where not traced)."""
    tpe = table.time_per_epoch
    return eta * table.avg_power * tpe + (1.0 - eta) * table.max_power * tpe


@dataclass(frozen=True)
class Expected:
    """Expected per-recurrence outcome of a fixed configuration.

    Attributes:
        batch_size: Batch size.
        power_limit: Power limit (unit: W).
        cost: Expected cost of one recurrence (unit: J).
        energy: Expected energy (unit: J).
        time: Expected time (unit: s).
    """

    batch_size: int
    power_limit: float
    cost: float
    energy: float
    time: float


def expected(table: JobTable, eta: float, row: int, col: int, objective: Objective | None = None) -> Expected:
    """Expected outcome of batch-size row ``row`` at limit column ``col`` (mean target epoch of the runs that reached).

    The cost is ``eta``'s energy-time cost, or ``objective``'s trial cost when given.
    """
    mean_epochs = float(table.mean_epochs[row])
    energy = mean_epochs * float(table.avg_power[row, col] * table.time_per_epoch[row, col])
    time = mean_epochs * float(table.time_per_epoch[row, col])
    objective = objective or Objective("cost", eta=eta)
    cost = objective.trial_cost(energy, time, table.max_power, reference_time(table))
    return Expected(table.batch_sizes[row], table.power_limits[col], cost, energy, time)


def reference_time(table: JobTable) -> float:
    """Expected time of the default batch size to the target at the max limit (unit: s): the ``max-slowdown`` reference."""
    row, col = table.index(table.default_batch_size), table.power_limits.index(max(table.power_limits))
    return float(table.mean_epochs[row]) * float(table.time_per_epoch[row, col])


def default_baseline(table: JobTable, eta: float, objective: Objective | None = None) -> Expected:
    """Default: b0 (capped) at the GPU's max power limit, every recurrence."""
    col = table.power_limits.index(max(table.power_limits))
    return expected(table, eta, table.index(table.default_batch_size), col, objective)


def oracle_baseline(table: JobTable, eta: float, objective: Objective | None = None) -> Expected:
    """Oracle: the cheapest fixed (batch size, limit) in hindsight, among batch sizes whose every run reached the target."""
    best: Expected | None = None
    for row, runs in enumerate(table.target_epochs):
        if np.any(np.isnan(runs)) or np.any(runs > table.job.max_epochs):
            continue
        for col in range(len(table.power_limits)):
            if math.isnan(table.time_per_epoch[row, col]):
                continue
            e = expected(table, eta, row, col, objective)
            if best is None or e.cost < best.cost:
                best = e
    if best is None:
        raise ValueError(f"no batch size of {table.job.name} reaches the target in every traced run")
    return best


def grid_search_cost(table: JobTable, eta: float, horizon: int, seed: int) -> float:
    """Grid search on sampled paths: each (batch size, limit) once in order, then the cheapest that converged.

    No early stopping; a path that never reaches the target runs ``max_epochs``.

    Returns:
        Cumulative cost over ``horizon`` recurrences (unit: J).
    """
    rng = np.random.default_rng([seed, 0x6E1D])
    cost = epoch_costs(table, eta)
    configs = [
        (r, c)
        for r in range(len(table.batch_sizes))
        for c in range(len(table.power_limits))
        if not math.isnan(cost[r, c])
    ]
    total, best_cost = 0.0, math.inf
    best: tuple[int, int] | None = None
    for k in range(horizon):
        r, c = configs[k] if k < len(configs) or best is None else best
        runs = table.target_epochs[r]
        target = float(runs[rng.integers(len(runs))])
        reached = not math.isnan(target) and target <= table.job.max_epochs
        trial = (target if reached else table.job.max_epochs) * float(cost[r, c])
        total += trial
        if k < len(configs) and reached and trial < best_cost:
            best, best_cost = (r, c), trial
        if k == len(configs) - 1 and best is None:
            raise ValueError(f"grid search: no configuration of {table.job.name} reached the target")
    return total
