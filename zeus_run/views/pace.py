"""The default's pace read from every batch size: what the other batch sizes' runs say about the default's cost.

A run's cost is its epochs times its pace (cost per epoch). Within one job, pace scales predictably with batch
size (larger batches: fewer, longer steps), so the job's runs at other batch sizes say much about the default's
pace, and one lucky (or unlucky) run of the default says less about it than they do. How many epochs the
default needs to reach the target is only ever seen in the default's own runs: nothing is borrowed there.

`borrowed` fits ``log(pace)`` against ``log(batch size)`` (a line, least squares over each other batch size's
mean) on the batch sizes that converged at the default's limit (a CPU job: no limit), and predicts the default's.
How far to trust the line is measured, not assumed: each batch size's mean is predicted from the others
(leave-one-out), and the mean square of those misses, plus the noise of the line's own inputs at the default
(one run's pace variance times the line's leverage there, over the fewest runs of a batch size), is the line's
variance at the default (`Borrowed`). The
default's own mean pace has the variance of a mean, ``s_p^2 / n0`` (``s_p``: how much one run's pace varies,
pooled over every batch size as `zeus_run.views.evidence.spread` pools costs). The two are weighed by the inverse
of their variances: the line moves the default's mean pace by ``w x (line - own)``, ``w = v_own / (v_own + v_line)``,
and the pace's share of the default's variance shrinks to ``v_own x v_line / (v_own + v_line)``. The epochs' share
(the rest of a run's spread, and its rounding to whole epochs) stays ``/ n0``: only the default's own runs, or a
control run of it (`zeus_run.engine.control`), narrow it.

It is used only where it can be checked: at least `MIN_OTHERS` other batch sizes (so each can be predicted from
the others), and the default between the smallest and the largest of them (the line interpolates, never
extrapolates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zeus_run.views.evidence import Key, Run

#: Other batch sizes needed before the line is used (each predicted from at least two others).
MIN_OTHERS = 3


@dataclass(frozen=True)
class Borrowed:
    """What the other batch sizes say about the default's pace, per quantity (``cost``, ``energy``, ``time``).

    Attributes:
        shift: ``log`` of the factor the default's mean moves by.
        variance: Variance of ``log`` of the default's mean with the borrowed pace (replaces ``s0^2 / n0``).
        weight: The line's weight in the default's pace (0: its own runs alone; near 1: the line's).
        batch_sizes: The batch sizes the line was fitted on.
    """

    shift: tuple[float, float, float]
    variance: tuple[float, float, float]
    weight: tuple[float, float, float]
    batch_sizes: tuple[int, ...]


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` through ``points`` (x, y)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0
    return my - slope * mx, slope


def _pooled(groups: Sequence[Sequence[float]]) -> float:
    """Variance of one value about its group's mean, pooled as `zeus_run.views.evidence.spread` pools (0: unknown)."""
    variances, squares, df = [], [], 0
    for g in groups:
        if len(g) < 2:
            continue
        m = sum(g) / len(g)
        squares.append(sum((v - m) ** 2 for v in g))
        variances.append(squares[-1] / (len(g) - 1))
        df += len(g) - 1
    if not df:
        return 0.0
    return max(sum(variances) / len(variances), sum(squares) / df)


def borrowed(
    groups: Mapping[Key, Sequence[Run]],
    b0: int,
    limit: float | None,
    own: Sequence[Run],
    spread: Sequence[float],
    rounding: float,
) -> Borrowed | None:
    """The default's pace from its own runs and the line through the other batch sizes' (None: not enough to check).

    Args:
        groups: Each (batch size, limit)'s converged runs (`zeus_run.views.evidence.Evidence.groups`).
        b0: The default batch size.
        limit: The default limit (None: no limit, a CPU job): the line uses the groups at it.
        own: The default's runs as the default would have run them, with their epochs.
        spread: How much one run varies, ``(cost, energy, time)`` (log scale), b0's rounding aside.
        rounding: b0's rounding to whole epochs (`zeus_run.views.evidence.Spread.rounding`).
    """
    mine = [r for r in own if r.epochs > 0 and min(r.values) > 0]
    if not mine:
        return None
    others: dict[int, list[Run]] = {}
    for (bs, lim), runs in groups.items():
        if bs == b0 or lim != limit:
            continue
        usable = [r for r in runs if r.epochs > 0 and not r.swept and min(r.values) > 0]
        if usable:
            others.setdefault(bs, []).extend(usable)
    if len(others) < MIN_OTHERS or not min(others) < b0 < max(others):
        return None
    shifts, variances, weights = [], [], []
    for k in range(3):
        paces = {bs: [math.log(r.values[k] / r.epochs) for r in runs] for bs, runs in others.items()}
        own_logs = [math.log(r.values[k] / r.epochs) for r in mine]
        points = [(math.log(bs), sum(v) / len(v)) for bs, v in sorted(paces.items())]
        misses = []
        for i, (x, y) in enumerate(points):
            a, b = _line(points[:i] + points[i + 1 :])
            misses.append(y - (a + b * x))
        s_pace2 = _pooled([*paces.values(), own_logs])
        a, b = _line(points)
        x0 = math.log(b0)
        mx = sum(x for x, _ in points) / len(points)
        sxx = sum((x - mx) ** 2 for x, _ in points)
        leverage = 1.0 / len(points) + ((x0 - mx) ** 2 / sxx if sxx > 0 else 0.0)
        fewest = min(len(v) for v in paces.values())
        # How far the line misses (each batch size from the others), and never less than its inputs' own noise.
        v_line = sum(m * m for m in misses) / len(misses) + s_pace2 * leverage / fewest
        predicted = a + b * x0
        n0 = len(mine)
        v_own = s_pace2 / n0
        v_epochs = (max(spread[k] ** 2 - s_pace2, 0.0) + rounding**2) / n0
        if v_own <= 0 or v_line <= 0:  # nothing to weigh: the default's own pace stands
            shifts.append(0.0)
            variances.append(v_epochs + v_own)
            weights.append(0.0)
            continue
        w = v_own / (v_own + v_line)
        mean_own = sum(own_logs) / n0
        shifts.append(w * (predicted - mean_own))
        variances.append(v_epochs + v_own * v_line / (v_own + v_line))
        weights.append(w)
    return Borrowed(
        (shifts[0], shifts[1], shifts[2]),
        (variances[0], variances[1], variances[2]),
        (weights[0], weights[1], weights[2]),
        tuple(sorted(others)),
    )
