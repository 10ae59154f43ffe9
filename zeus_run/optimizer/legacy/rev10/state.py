"""What ``zeus-voi`` learns (`VOIState`), its estimates, and the face of the policy its stages read (`Policy`).

Every stage of the policy (`zeus_run.optimizer.legacy.rev10.walk`, `~.laws`, `~.looks`, `~.bandit`, `~.warm`) imports
this module and no other of the package: the policy (`zeus_run.optimizer.legacy.rev10.policy`) imports them, never the
other way round.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from zeus_run.optimizer._base import Observation
from zeus_run.optimizer._gts import ArmStats

#: ``(n, sum, sum of squares)`` of the logs of one batch size's epochs to the target.
LogStats = tuple[int, float, float]


def log_stats(runs: Sequence[int]) -> LogStats:
    """The `LogStats` of ``runs`` (epochs of 0 left out)."""
    logs = [math.log(e) for e in runs if e > 0]
    return len(logs), sum(logs), sum(x * x for x in logs)


def add_log(stats: LogStats | None, epochs: int) -> LogStats:
    """``stats`` (None: none yet) with one more run of ``epochs`` (> 0)."""
    n, s1, s2 = stats or (0, 0.0, 0.0)
    x = math.log(epochs)
    return n + 1, s1 + x, s2 + x * x


@dataclass(frozen=True)
class WarmStart:
    """The source of a warm start: the same job's history elsewhere (`zeus_run.optimizer.legacy.rev10.warm`).

    Attributes:
        source: Where it came from (a run directory's path, or a label in simulations).
        fingerprint: ``sha256:...`` of the source's records as copied (what every record of the run names).
        observations: Its observations, in order (`Observation.warm` set).
    """

    source: str
    fingerprint: str
    observations: tuple[Observation, ...]

    def __post_init__(self) -> None:
        marked = tuple(o if o.warm else dataclasses.replace(o, warm=True) for o in self.observations)
        object.__setattr__(self, "observations", marked)


@dataclass(frozen=True)
class WarmRuns:
    """One batch size's runs in the source.

    Attributes:
        tried: Runs observed.
        reached: Runs that reached the target.
        costs: Steady costs (without the sweep) of the runs that reached it (unit: J).
        epochs: Their epochs to the target.
    """

    tried: int = 0
    reached: int = 0
    costs: tuple[float, ...] = ()
    epochs: tuple[int, ...] = ()


@dataclass(frozen=True)
class VOIState:
    """Everything ``zeus-voi`` has learned.

    Attributes:
        step: Number of observations folded in.
        arms: Cost statistics of every batch size ever observed (unit: J; windowed
            if the policy has a ``window_size``).
        reached: Per batch size, how many of its trials reached the target.
        first: Per batch size, its first observation.
        rest: Cost statistics of every later observation of each batch size.
        paces: Per batch size, the cost per epoch of its most recent converged observations
            after the first (at most `zeus_run.optimizer.early_stop.PACE_WINDOW`).
        pace_medians: The median of each batch size's ``paces``, taken as they change (not at every decision).
        spent: Cost of every observation (unit: J; the budget, `ZeusVOIOptimizer.within_budget`).
        epoch_logs: Per batch size, the logs of its converged runs' epochs as `LogStats` totals (the noise of epoch
            counts).
        checks: Converged runs of a batch size after its first, whose pace the engine checks against
            the batch size's median (`zeus_run.optimizer.legacy.rev10.looks.slow_runs`).
        slowdowns: The factor of each of those that ran over `SLOWDOWN` times slower.
        overheads: Per batch size, its first run's sweep overhead over its steady cost.
        epoch_totals: Per batch size, the sum and count of its converged runs' epochs (the trend's and the laws').

    Every field is a running total or bounded (`paces`: a window; `first`, `overheads`: one per batch size), so that
    folding one more observation and deciding cost the same at recurrence 10 and 10,000; only ``slowdowns`` grows,
    with the runs found slow.
        warm: Per batch size, its runs in the warm start's source (`zeus_run.optimizer.legacy.rev10.warm`).
    """

    step: int
    arms: Mapping[int, ArmStats] = field(default_factory=dict)
    reached: Mapping[int, int] = field(default_factory=dict)
    first: Mapping[int, Observation] = field(default_factory=dict)
    rest: Mapping[int, ArmStats] = field(default_factory=dict)
    paces: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    pace_medians: Mapping[int, float] = field(default_factory=dict)
    spent: float = 0.0
    epoch_logs: Mapping[int, LogStats] = field(default_factory=dict)
    checks: int = 0
    slowdowns: tuple[float, ...] = ()
    overheads: Mapping[int, float] = field(default_factory=dict)
    epoch_totals: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    warm: Mapping[int, WarmRuns] = field(default_factory=dict)


class Estimate(NamedTuple):
    """Posterior of one arm's mean cost.

    Attributes:
        mean: Posterior mean cost (unit: J).
        var: Variance of that mean (unit: J^2).
    """

    mean: float
    var: float


class Policy(Protocol):
    """What the stages read of the policy (`zeus_run.optimizer.legacy.rev10.policy.ZeusVOIOptimizer` has it)."""

    batch_sizes: tuple[int, ...]
    default_batch_size: int
    PLANNING_HORIZON: float
    STEP_SD: float
    TREND: float
    CONVERGE_PRIOR: tuple[float, float]

    @property
    def walker(self) -> Policy:
        """The policy on the walk's grid (`zeus_run.optimizer.legacy.rev10.laws.walk_grid`), built once."""
        ...

    def planning_horizon(self, state: VOIState) -> float: ...

    def converge_chance(self, state: VOIState) -> float: ...

    def within_budget(self, state: VOIState, est: Mapping[int, Estimate], probe: float, converge: float) -> bool: ...

    def predict(
        self, bs: tuple[int, ...], est: Mapping[int, Estimate], end: int, step: int, cv2: float
    ) -> tuple[float, float]: ...

    def warm_candidates(
        self, state: VOIState, est: Mapping[int, Estimate], cv2: float, grid: Sequence[int]
    ) -> Iterator[tuple[int, str, tuple[float, float]]]: ...
