"""The floors a learning policy is measured against: the informed start and the guided walk, from a job's traces."""

from __future__ import annotations

import math

from zeus_run.sim._baselines import oracle_baseline
from zeus_run.sim._simulator import TraceExecutor
from zeus_run.sim._traces import JobTable


def informed_start(table: JobTable, eta: float = 0.5, horizon: int | None = None) -> float:
    """Expected cumulative cost of the *informed start*: the floor of a policy that starts at b0 (unit: J).

    The informed start knows the Oracle's batch size from the outset, yet runs as zeus-run
    must: b0 in recurrence 1, then the Oracle's batch size in every later one, and each
    batch size's first run profiles the power limits as `TraceExecutor` charges it (a full
    or, on a short horizon, a shortened sweep). Epochs are each batch size's mean over its
    traced runs. What a learning policy pays beyond this is the price of not knowing which
    batch size is best; what this pays beyond the Oracle is b0's first run and profiling,
    which no policy that starts at b0 avoids.

    Args:
        table: The job on one GPU.
        eta: Cost knob in [0, 1].
        horizon: Recurrences (None: the paper's horizon).
    """
    n = table.horizon if horizon is None else horizon
    oracle = table.index(oracle_baseline(table, eta).batch_size)
    return _expected_path(table, eta, n, [table.index(table.default_batch_size)], oracle)


def guided_walk(table: JobTable, eta: float = 0.5, horizon: int | None = None, beta: float | None = 2.0) -> float:
    """Expected cumulative cost of the *guided walk*: the floor of a walk that moves one batch size at a time (unit: J).

    The guided walk knows where the Oracle's batch size is and walks there as a policy that steps to
    neighbouring batch sizes must: b0 in recurrence 1, then every batch size between b0 and the Oracle's, one a
    recurrence, then the Oracle's neighbour beyond it once (both neighbours when b0 is the Oracle's) to see
    that the cost rises there, then the Oracle's batch size. Epochs and profiling as in `informed_start`; a
    batch size that never reached the target in the traces runs until its cost passes ``beta`` times the
    cheapest run before it (the paper's early stop) or ``max_epochs``. `zeus` and `zeus-voi` walk so (with a
    stride now and then); what they pay beyond this is the price of not knowing the direction and where to
    stop, and what this pays beyond `informed_start` is the walk itself.

    Args:
        table: The job on one GPU.
        eta: Cost knob in [0, 1].
        horizon: Recurrences (None: the paper's horizon).
        beta: The early stop's factor for a batch size that never converges (None: it runs ``max_epochs``).
    """
    n = table.horizon if horizon is None else horizon
    start, oracle = table.index(table.default_batch_size), table.index(oracle_baseline(table, eta).batch_size)
    step = 1 if oracle > start else -1
    path = list(range(start, oracle, step)) if oracle != start else [start]
    confirm = [oracle - 1, oracle + 1] if oracle == start else [oracle + step]
    path += [i for i in confirm if 0 <= i < len(table.batch_sizes)]
    return _expected_path(table, eta, n, path, oracle, beta)


def _expected_path(
    table: JobTable, eta: float, n: int, first: list[int], then: int, beta: float | None = None
) -> float:
    """Expected cost of running the rows ``first`` in order, then row ``then``, over ``n`` recurrences (unit: J).

    Each row's first run profiles the power limits (`TraceExecutor.power_limit`); a row with no converged
    run costs up to ``beta`` times the cheapest converged run before it, at most ``max_epochs`` epochs,
    and its recurrence runs again."""
    executor = TraceExecutor(table, eta, seed=0)

    def cost(row: int, col: int, epochs: float, profiled: bool) -> float:
        return executor.objective.trial_cost(*executor._charge(row, col, epochs, profiled), table.max_power)

    total, best, recurrence, queue = 0.0, math.inf, 1, list(first)
    while recurrence <= n:
        row = queue.pop(0) if queue else then
        col, profiled = executor.power_limit(row, recurrence, n)
        epochs = float(table.mean_epochs[row])
        if math.isnan(epochs):  # never converges: cut once past beta x the best so far, or at max_epochs
            cut = math.inf if beta is None else beta * best
            k = next(
                (k for k in range(1, table.job.max_epochs) if cost(row, col, k, profiled) > cut), table.job.max_epochs
            )
            total += cost(row, col, k, profiled)
            continue  # the recurrence runs again
        c = cost(row, col, epochs, profiled)
        total, best, recurrence = total + c, min(best, c), recurrence + 1
    return total
