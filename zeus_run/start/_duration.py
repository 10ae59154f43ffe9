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


@dataclass(frozen=True)
class Duration:
    """The duration planned for (None: too little history, with ``why``).

    Attributes:
        seconds: What the deadline is kept for: the run must end by the deadline if it takes this long.
        runs: Earlier runs it was sized from.
        why: Why there is none.
        typical: The median run (unit: s), which the lowest-carbon window is sought for.
    """

    seconds: float | None
    runs: int
    why: str = ""
    typical: float | None = None


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
    return Duration(max(q, float(runs.max())), len(runs), typical=float(np.median(runs)))
