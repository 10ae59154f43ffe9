"""Whether a recurrence re-runs the default as a control: consulted before the optimizer decides.

A saving is stated against the default's mean cost, and that mean rests on the default's own runs
(`zeus_run.views.baseline`). The optimizer leaves a default that looks dear after one or two runs, so
the interval of every saving stays as wide as one run's noise and its rounding to whole epochs
(`zeus_run.views.evidence.Spread`) for ever: "no measurable difference yet" and no way to tell.

`control` decides, from the history alone (so a replay re-derives it exactly), whether the next
recurrence runs the default batch size again, at no cost threshold, as a control. It does so only:

* after exploration (a try of a stage other than ``pruning`` or ``explore`` ran), with the default
  converged at least once and how much runs vary known (some batch size converged twice);
* where the statement is still too wide to say anything: the default's 90% range (log scale,
  ``t x s0 / sqrt(n0)``) is wider than the gap between the default's mean and the cheapest batch size's
  (the saving is not measurable), or wider than `WIDE` either way (the saving's interval spans more than
  about 30 points);
* where one more run can tell within the recurrences left (the runs a measurable statement needs,
  ``(t x s0 / gap)^2 - n0``, are at most those left), or narrow a range wider than `WIDE`;
* priced like any probe: a control costs what the default costs beyond the cheapest batch size's mean,
  and the controls' extra, this one's included, stays within ``max_share`` of what the job has spent,
  this run included (``saving.control.max_share`` in the spec; none: never).

Its spread is the views' (`zeus_run.views.evidence.spread`: the larger of the plain and the
degrees-of-freedom-weighted pooling of each (batch size, limit)'s log-cost variance, with b0's rounding
to whole epochs), computed here from the records because the engine may not import the views.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord

#: The stage of a control's decision (its record's ``stage``).
STAGE = "control"
#: Stages that are exploration: no control before a try of another stage ran.
EXPLORING = ("pruning", "explore")
#: A half-width of the default's range (log scale) above which the statement says little either way.
WIDE = 0.15
#: The spec's default share (``saving.control.max_share``).
DEFAULT_SHARE = 0.05


@dataclass(frozen=True)
class Standing:
    """What the saving rests on now, as the control sees it.

    Attributes:
        runs: The default's converged runs.
        half: Half-width of the default's 90% range (log scale; inf: unknown).
        gap: ``log(default's mean / cheapest batch size's mean)`` (0: the default is the cheapest).
        extra: What the controls so far cost beyond the cheapest batch size's mean (unit: J).
        spent: What every try spent (unit: J).
        default_mean: The default's mean cost (unit: J).
        cheapest: The cheapest other batch size's mean cost (unit: J), None if none converged.
    """

    runs: int
    half: float
    gap: float
    extra: float
    spent: float
    default_mean: float
    cheapest: float | None


def standing(records: Sequence[TrialRecord], b0: int) -> Standing | None:
    """The default's runs, its range and the gap to the cheapest batch size (None before the default converged)."""
    groups: dict[tuple[int, float | None], list[TrialRecord]] = defaultdict(list)
    for r in records:
        if r.reached and r.observed and r.stop_reason.observed and r.cost > 0:
            groups[(r.batch_size, r.power_limit)].append(r)
    own = [r for (bs, _), rs in groups.items() if bs == b0 for r in rs]
    if not own:
        return None
    variances, squares, df = [], [], 0
    for rs in groups.values():
        if len(rs) < 2:
            continue
        logs = [math.log(r.cost) for r in rs]
        m = sum(logs) / len(logs)
        squares.append(sum((v - m) ** 2 for v in logs))
        variances.append(squares[-1] / (len(rs) - 1))
        df += len(rs) - 1
    epochs = [r.epochs for r in own if r.epochs > 0]
    rounding2 = sum(1.0 / (4.0 * e * e) for e in epochs) / len(epochs) if epochs else 0.0
    if df:
        s2 = max(sum(variances) / len(variances), sum(squares) / df) + rounding2
        half = t90(df) * math.sqrt(s2 / len(own))
    else:
        half = math.inf
    mean0 = sum(r.cost for r in own) / len(own)
    others = [sum(r.cost for r in rs) / len(rs) for (bs, _), rs in groups.items() if bs != b0]
    cheapest = min(others) if others else None
    gap = math.log(mean0 / cheapest) if cheapest is not None and cheapest < mean0 else 0.0
    base = cheapest if cheapest is not None else mean0
    extra = sum(max(0.0, r.spent_cost - base) for r in records if r.stage == STAGE)
    return Standing(len(own), half, gap, extra, sum(r.spent_cost for r in records), mean0, cheapest)


def control(records: Sequence[TrialRecord], b0: int, max_share: float | None, left: int | None) -> str | None:
    """Why the next recurrence re-runs the default as a control, or None: let the optimizer decide.

    Args:
        records: The history (a pure function of it: a replay re-derives the decision).
        b0: The default batch size.
        max_share: The most the controls' extra may take of what the job spent (None or 0: never).
        left: Recurrences left, this one included (None: open-ended).
    """
    if not max_share or max_share <= 0 or (left is not None and left < 1):
        return None
    if not any(r.stop_reason.observed and r.stage not in (*EXPLORING, STAGE) for r in records):
        return None
    s = standing(records, b0)
    if s is None or s.cheapest is None or not math.isfinite(s.half) or s.gap <= 0:
        return None
    measurable = s.half < s.gap
    if measurable and s.half <= WIDE:
        return None
    need = math.ceil((s.half * math.sqrt(s.runs) / s.gap) ** 2) - s.runs
    if (measurable or (left is not None and need > left)) and s.half <= WIDE:
        return None  # cannot tell in time, and already narrow: nothing a control buys
    cost = s.default_mean - s.cheapest
    if s.extra + cost > max_share * (s.spent + s.default_mean):
        return None
    return (
        f"a control: the default's cost rests on {s.runs} run{'s' if s.runs != 1 else ''}, known to "
        f"+-{s.half * 100:.0f}% against a gap of {s.gap * 100:.0f}% to the cheapest batch size; batch size {b0} "
        f"runs again (controls cost {(s.extra + cost) / (s.spent + s.default_mean) * 100:.1f}% of the spend, at "
        f"most {max_share * 100:g}%: saving.control.max_share)"
    )


def t90(df: int) -> float:
    """Two-sided 90% Student's t quantile (Cornish-Fisher, within 1% from df 2 up; exact enough for a decision)."""
    z = 1.6448536269514722
    g1 = (z**3 + z) / 4.0
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96.0
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384.0
    if df <= 1:
        return 6.313751514675043
    return z + g1 / df + g2 / df**2 + g3 / df**3
