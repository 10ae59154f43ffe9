"""The start planner: the lowest-carbon start before the deadline, followed only where the forecast has earned it.

`plan` is a pure function of the window, the job's run durations, the forecast and the series of what
happened. It moves a start only when all of these hold (otherwise the run starts at its trigger, and the
plan says why):

* the job has at least `zeus_run.start.MIN_RUNS` runs at the batch size and power limit it is about to use
  (the planned duration is their 95th percentile plus a margin, `zeus_run.start.planned`), and that
  duration fits in the window: the chosen start finishes by the deadline for that duration;
* the forecast promises a saving above ``min_saving`` against starting on time;
* the forecast, asked the same question on up to `NIGHTS` earlier nights of the series (the same window a
  day, two days ... earlier), saved carbon against what then happened: the mean realized saving less one
  standard error of it is above zero;
* tonight's promise, scaled by the share of its promises the forecast kept on those nights (mean realized
  over mean promised saving, at most 1), still beats ``min_saving``.

Every mean over a span integrates the step series, partial steps weighted by the part they cover
(`zeus_run.start.Series`). One decision costs a few vectorised searches over the series (under a
millisecond per night checked on a year of half-hourly rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zeus_run.start._duration import Duration, planned
from zeus_run.start._forecast import DAY, Forecast
from zeus_run.start._series import Series
from zeus_run.start._settings import MIN_SAVING
from zeus_run.start._window import Window, clock, iso

#: Earlier nights the forecast is checked on.
NIGHTS = 14
#: Fewest earlier nights (in the series) the forecast must have been checked on before it is followed.
MIN_NIGHTS = 7


@dataclass(frozen=True)
class Plan:
    """When to start one recurrence, and why.

    Attributes:
        trigger: When the recurrence was triggered (Unix seconds).
        deadline: When it is due.
        start_at: When to start (the trigger when not moved).
        moved: Whether the start was moved from the trigger.
        reason: One line: why this start.
        duration: The duration planned for (unit: s; None: too little history).
        forecast_now: The forecast at the trigger (unit: g/kWh; None: no forecast).
        forecast_at_start: The forecast mean over the planned run from ``start_at``.
        forecast_on_time: The forecast mean over the planned run from the trigger.
        promised: The saving the forecast promises against starting on time (share).
        expected: ``promised`` times the share of its promises the forecast kept on earlier nights.
        skill: The forecast's mean realized saving on the earlier nights it was checked on.
        nights: Earlier nights it was checked on.
        provenance: Where the forecast came from.
    """

    trigger: float
    deadline: float
    start_at: float
    moved: bool
    reason: str
    duration: float | None = None
    forecast_now: float | None = None
    forecast_at_start: float | None = None
    forecast_on_time: float | None = None
    promised: float | None = None
    expected: float | None = None
    skill: float | None = None
    nights: int = 0
    provenance: str = "none"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601 UTC, shares and g/kWh rounded."""

        def r(x: float | None, n: int = 4) -> float | None:
            return None if x is None else round(float(x), n)

        return {
            "trigger": iso(self.trigger),
            "start_at": iso(self.start_at),
            "deadline": iso(self.deadline),
            "moved": self.moved,
            "reason": self.reason,
            "planned_duration_s": r(self.duration, 1),
            "forecast_now": r(self.forecast_now, 1),
            "forecast_at_start": r(self.forecast_at_start, 1),
            "forecast_on_time": r(self.forecast_on_time, 1),
            "promised_saving": r(self.promised),
            "expected_saving": r(self.expected),
            "skill": r(self.skill),
            "nights_checked": self.nights,
            "provenance": self.provenance,
        }

    def line(self) -> str:
        """One line for people: ``start 03:30 (due 07:00): ...``."""
        return f"start {clock(self.start_at)} (due {clock(self.deadline)}): {self.reason}"


def best_start(
    series: Series, window: Window, duration: float | Sequence[float], latest: float | None = None
) -> tuple[float, float, float]:
    """The start in ``[trigger, latest]`` with the lowest carbon of a run of ``duration``.

    ``duration`` may be several lengths (scenarios of a run whose length is not known in advance): the start
    with the lowest intensity integrated over each of them, summed, wins. ``latest`` defaults to
    ``deadline - max(duration)``; the planner passes the deadline minus the duration it keeps the deadline for
    (a high quantile). The integral of a step series over a span of fixed length is piecewise linear in its
    start, so its minimum lies where the span's start or end meets a row; those are the only candidates.
    Ties go to the earliest.

    Returns:
        (start, mean intensity from it, mean intensity from the trigger), weighted by length over the scenarios.
    """
    lengths = np.atleast_1d(np.asarray(duration, dtype=float))
    lo = window.trigger
    hi = window.deadline - float(lengths.max()) if latest is None else latest
    total = float(lengths.sum())

    def means(starts: np.ndarray) -> np.ndarray:
        ends = starts[:, None] + lengths[None, :]
        return (series.cumulative(ends) - series.cumulative(starts)[:, None]).sum(axis=1) / total

    on_time = float(means(np.array([lo]))[0])
    if hi <= lo:
        return lo, on_time, on_time
    cands = [np.array([lo, hi]), series.breakpoints(lo, hi)]
    cands += [series.breakpoints(lo + d, hi + d) - d for d in lengths]
    starts = np.unique(np.clip(np.concatenate(cands), lo, hi))
    m = means(starts)
    i = int(np.argmin(m))  # unique() sorted them: the first minimum is the earliest
    return float(starts[i]), float(m[i]), on_time


def span_mean(series: Series, start: float, duration: float | Sequence[float]) -> float:
    """The mean of ``series`` over runs of ``duration`` (one length or several, weighted by length) from ``start``."""
    lengths = np.atleast_1d(np.asarray(duration, dtype=float))
    return float((series.cumulative(start + lengths) - series.cumulative(start)).sum() / lengths.sum())


def _saving(start_mean: float, on_time: float) -> float:
    return 1.0 - start_mean / on_time if on_time > 0 else 0.0


def check_skill(
    forecast: Forecast,
    actual: Series,
    window: Window,
    duration: float | Sequence[float],
    keep: float | None = None,
    nights: int = NIGHTS,
) -> tuple[np.ndarray, np.ndarray]:
    """The forecast asked on up to ``nights`` earlier nights the actual series covers, for a run of ``duration``
    (one length or scenarios of it) that must start by the deadline minus ``keep`` (default: the longest).

    Returns:
        (promised, realized) saving of following it on each night checked.
    """
    promised, realized = [], []
    for k in range(1, nights + 1):
        w = window.shifted(-k * DAY)
        if not actual.covers(w.trigger, w.deadline):
            continue
        latest = None if keep is None else w.deadline - keep
        s, mean, on_time = best_start(forecast.predict(w.trigger, w.trigger, w.deadline), w, duration, latest)
        promised.append(_saving(mean, on_time))
        realized.append(_saving(span_mean(actual, s, duration), span_mean(actual, w.trigger, duration)))
    return np.asarray(promised), np.asarray(realized)


def plan(
    window: Window,
    durations: Sequence[float] | Duration,
    forecast: Forecast | None,
    actual: Series | None = None,
    *,
    min_saving: float = MIN_SAVING,
    nights: int = NIGHTS,
    min_nights: int = MIN_NIGHTS,
) -> Plan:
    """When to start the recurrence triggered at ``window.trigger``.

    Args:
        window: Its trigger and deadline.
        durations: The job's earlier runs at the batch size and power limit it is about to use (unit: s), or
            the duration already planned (`zeus_run.start.planned`).
        forecast: The forecast source (None: start on time).
        actual: What happened, for the forecast's skill check (None: the forecast's own series where it is a
            CSV, else no check and no move).
        min_saving: Do not move for a promised saving (after the measured error) at or below this share.
        nights: Earlier nights to check the forecast on.
        min_nights: Fewest nights checked before the forecast may be followed.
    """
    T, D = window.trigger, window.deadline
    on_time = Plan(T, D, T, False, "", provenance=getattr(forecast, "provenance", "none"))
    if D <= T:
        return _with(on_time, reason=f"the deadline {iso(D)} is not after the trigger {iso(T)}: starting now")
    if forecast is None:
        return _with(on_time, reason="no forecast (start.forecast: none): starting on time")
    d = durations if isinstance(durations, Duration) else planned(durations)
    if d.seconds is None:
        return _with(on_time, reason=f"{d.why}: starting on time")
    dur = d.seconds
    typical: Sequence[float] = d.scenarios or (d.typical if d.typical is not None else dur,)
    on_time = _with(on_time, duration=dur)
    if T + dur > D:
        return _with(
            on_time,
            reason=f"the run (planned {dur / 3600:.2f} h) does not fit between the trigger and the deadline: starting now",
        )
    tonight = forecast.predict(T, T, D)
    s, mean, on_mean = best_start(tonight, window, typical, D - dur)
    promised = _saving(mean, on_mean)
    on_time = _with(
        on_time,
        forecast_now=float(tonight.at(T)),
        forecast_at_start=on_mean,
        forecast_on_time=on_mean,
        promised=promised,
    )
    if promised <= min_saving or s <= T:
        return _with(
            on_time,
            reason=f"the forecast promises {promised:+.1%} against starting on time (min_saving {min_saving:.0%}): starting on time",
        )
    truth = actual if actual is not None else getattr(forecast, "series", None)
    if truth is None:
        return _with(on_time, reason="no series of what happened to check the forecast against: starting on time")
    p, r = check_skill(forecast, truth, window, typical, dur, nights)
    if len(r) < min_nights:
        return _with(
            on_time,
            nights=len(r),
            reason=f"the forecast could be checked on {len(r)} earlier night(s) of the series, {min_nights} are needed: starting on time",
        )
    skill = float(r.mean())
    low = skill - float(r.std(ddof=1)) / np.sqrt(len(r))  # one standard error under it
    kept = min(max(skill / float(p.mean()), 0.0), 1.0) if float(p.mean()) > 0 else 0.0
    expected = promised * kept
    on_time = _with(on_time, nights=len(r), skill=skill, expected=expected)
    if low <= 0:
        return _with(
            on_time,
            reason=(
                f"following this forecast saved {skill:+.1%} on the {len(r)} earlier nights checked (one standard "
                f"error under it: {low:+.1%}): starting on time"
            ),
        )
    if expected <= min_saving:
        return _with(
            on_time,
            reason=(
                f"the forecast promises {promised:+.1%}, {expected:+.1%} after its measured error on {len(r)} earlier "
                f"nights (min_saving {min_saving:.0%}): starting on time"
            ),
        )
    return _with(
        on_time,
        start_at=s,
        moved=True,
        forecast_at_start=mean,
        reason=(
            f"waiting for {mean:.0f} g/kWh (on time: {on_mean:.0f}), {expected:+.1%} expected after the forecast's "
            f"error on {len(r)} earlier nights"
        ),
    )


def _with(p: Plan, **changes: Any) -> Plan:
    import dataclasses

    return dataclasses.replace(p, **changes)
