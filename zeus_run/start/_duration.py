"""How long the run about to start will take: a quantile of the job's own runs at that batch size and power limit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: The share of runs that must finish within the planned duration.
QUANTILE = 0.95
#: Fewest runs at the batch size and power limit before the planner moves a start.
MIN_RUNS = 5
#: Slack over the quantile (unit: share of it): runs vary from night to night beyond what a few runs show.
MARGIN = 0.10
#: Recent runs the window is sought for, and the quantiles of them taken as scenarios.
RECENT = 30
SCENARIOS = (0.1, 0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class Duration:
    """The duration planned for (None: too little history, with ``why``).

    Attributes:
        seconds: What the deadline is kept for: the run must end by the deadline if it takes this long.
        runs: Earlier runs it was sized from.
        why: Why there is none.
        typical: The median run (unit: s).
        scenarios: Runs the lowest-carbon window is sought for (quantiles of the recent runs, unit: s): the start
            chosen has the lowest carbon summed over them, as a run whose length is not known in advance has.
    """

    seconds: float | None
    runs: int
    why: str = ""
    typical: float | None = None
    scenarios: tuple[float, ...] = ()


def planned(
    durations: Sequence[float] | Iterable[float], quantile: float = QUANTILE, min_runs: int = MIN_RUNS
) -> Duration:
    """The ``quantile`` of ``durations`` (unit: s) plus `MARGIN`, and never below the longest of them.

    Fewer than ``min_runs`` runs: None, and why.
    """
    runs = np.asarray([float(d) for d in durations if d is not None and d > 0], dtype=float)
    if len(runs) < min_runs:
        return Duration(
            None,
            len(runs),
            f"only {len(runs)} earlier run(s) at this batch size and power limit; {min_runs} are needed to size the window",
        )
    q = float(np.quantile(runs, quantile)) * (1.0 + MARGIN)
    recent = runs[-RECENT:]
    scenarios = tuple(float(x) for x in np.unique(np.quantile(recent, SCENARIOS)))
    return Duration(max(q, float(runs.max())), len(runs), typical=float(np.median(runs)), scenarios=scenarios)
