"""Just-in-time power-limit policy (the seeds' ``JITPowerLimitOptimizer``).

For a batch size, a profile gives each power limit's average power and
throughput. The best limit minimizes the cost of one unit of work:

    (eta * avg_power + (1 - eta) * max_power) / throughput

which, with throughput in epochs per second, is the cost of one epoch. The
same policy serves the trace simulator and real GPUs; the decision per batch
size is remembered in an immutable mapping folded from profiles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from zeus_run.objective import Objective
from zeus_run.records import PowerLimitMeasurement


def unit_cost(m: PowerLimitMeasurement, eta: float, max_power: float) -> float:
    """Cost of one unit of work at this limit (unit: J per unit of throughput)."""
    if m.throughput <= 0:
        return math.inf
    return (eta * m.avg_power + (1.0 - eta) * max_power) / m.throughput


def best_power_limit(profile: Sequence[PowerLimitMeasurement], eta: float, max_power: float) -> float:
    """The limit with the lowest `unit_cost`; ties go to the higher limit (faster).

    Raises:
        ValueError: The profile is empty.
    """
    if not profile:
        raise ValueError("empty power-limit profile")
    return min(profile, key=lambda m: (unit_cost(m, eta, max_power), -m.power_limit)).power_limit


@dataclass(frozen=True)
class PowerLimitState:
    """Chosen power limit per batch size (read-only mapping)."""

    chosen: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))

    def predict(self, batch_size: int) -> float | None:
        """The limit for ``batch_size``, or None if it still needs profiling."""
        return self.chosen.get(batch_size)


class JITPowerLimitOptimizer:
    """Picks and remembers the best power limit of each batch size from its profile."""

    def __init__(self, eta: float, max_power: float, objective: Objective | None = None) -> None:
        """Args:
        eta: Cost knob in [0, 1] (the ``cost`` objective's; ignored when ``objective`` is given).
        max_power: Max power of the job's GPUs (unit: W).
        objective: What the choice minimises (default: the ``cost`` objective with ``eta``).
        """
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"eta must be in [0, 1], got {eta}")
        self.eta = eta
        self.max_power = max_power
        self.objective = objective or Objective("cost", eta=eta)

    def initial_state(self) -> PowerLimitState:
        return PowerLimitState()

    def observe_profile(
        self, state: PowerLimitState, batch_size: int, profile: Sequence[PowerLimitMeasurement]
    ) -> PowerLimitState:
        """State after profiling ``batch_size`` (a later profile replaces an earlier one)."""
        chosen = dict(state.chosen)
        chosen[batch_size] = choose_power_limit(self.objective, profile, self.max_power)
        return PowerLimitState(MappingProxyType(chosen))


#: Recurrences ahead assumed for an open-ended job (``recurrences: null``) whose expected lifetime is not
#: given: the spec's default ``lifetime`` (`zeus_run.spec.DEFAULT_LIFETIME`).
OPEN_ENDED_RECURRENCES = 100.0


def recurrences_left(recurrence: int, horizon: int | None, lifetime: int | None = None) -> float:
    """Recurrences left including ``recurrence`` (1-based) of a job of ``horizon`` recurrences (None: open-ended,
    expected to live ``lifetime`` recurrences from any point on: a memoryless future)."""
    if horizon is None:
        return OPEN_ENDED_RECURRENCES if lifetime is None else float(lifetime)
    return float(max(1, horizon - recurrence + 1))


def sweep_more(costs: Sequence[float], n_limits: int, left: float) -> bool:
    """Whether a descending power-limit sweep should measure its next (lower) limit.

    The sweep walks the limits from the maximum down. ``costs`` are the unit costs measured
    so far (highest limit first). A full sweep is kept whenever at least ``n_limits``
    recurrences are left: its overhead is at most one epoch, repaid by choosing the best
    limit on every later epoch. The traces' cost curves fall from the maximum limit to a
    flat minimum and rise steeply towards the minimum limit (the lowest limits are the
    slowest and costliest to profile), but are not strictly unimodal (about half of the
    batch sizes have a second dip). So on a shorter horizon the sweep stops once the cost
    has risen at two consecutive limits below the best so far: the costly low limits are
    skipped, and a single noisy rise does not end it.

    Args:
        costs: Unit costs measured so far, highest limit first.
        n_limits: Limits a full sweep measures.
        left: Recurrences left (`recurrences_left`).
    """
    if len(costs) >= n_limits:
        return False
    if left >= n_limits or not costs:
        return True
    best = min(range(len(costs)), key=lambda i: costs[i])
    return len(costs) - 1 - best < SWEEP_PATIENCE


#: Consecutive limits costlier than the best so far that end a short-horizon sweep.
SWEEP_PATIENCE = 2


def choose_power_limit(objective: Objective, profile: Sequence[PowerLimitMeasurement], max_power: float) -> float:
    """The limit ``objective`` picks from a batch size's profile.

    Raises:
        ValueError: The profile is empty.
    """
    if objective.kind != "max-slowdown":
        return best_power_limit(profile, objective.cost_eta, max_power)
    if not profile:
        raise ValueError("empty power-limit profile")
    top = max(profile, key=lambda m: m.power_limit)
    floor = top.throughput / objective.factor
    eligible = [m for m in profile if m.throughput > 0 and m.throughput >= floor] or [top]
    return min(eligible, key=lambda m: (m.avg_power / m.throughput, -m.power_limit)).power_limit
