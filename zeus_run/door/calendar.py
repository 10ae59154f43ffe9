"""Which night a taken-over recurrence belongs to, for ``run --next`` (`carried`).

A ``run --next`` trigger runs one recurrence past those ended. Where it takes over a recurrence an earlier
trigger started (a dead launcher's trial adopted, a spec error's trial whose model is kept:
`zeus_run.executors.kept`), that recurrence is either the earlier trigger's night, and this trigger still owes
its own (the calendar catches up), or this same night's, triggered again after a crash or a fix, and running
another would cost a whole extra training run.

The job's slot tells them apart: a daily deadline (``start.by``) makes it a day; otherwise it is the median gap
between the starts of the history's recurrences (three gaps at least), and a day until the history shows one. A
taken-over recurrence started at least half a slot before this trigger is another night's and is carried;
one started later is tonight's. A pure function of the records, the spec and the clock.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence

from zeus_run.contract import iso_seconds
from zeus_run.records import TrialRecord
from zeus_run.spec import JobSpec

#: The slot of a job whose history does not show its cadence yet (unit: s): nightly, the common case.
DEFAULT_SLOT_S = 86_400.0
#: Gaps between recurrence starts needed before the history's cadence is trusted.
MIN_GAPS = 3


def slot_s(spec: JobSpec, records: Sequence[TrialRecord]) -> float:
    """The job's time between recurrences (unit: s): a day under ``start.by``, else the median gap between the
    starts (the trigger's time where recorded) of the history's recurrences, else `DEFAULT_SLOT_S`."""
    if spec.start.by is not None:
        return 86_400.0
    starts: dict[int, float] = {}
    for r in records:
        t = iso_seconds(r.triggered_at or r.started_at)
        if t is not None and (r.recurrence not in starts or t < starts[r.recurrence]):
            starts[r.recurrence] = t
    times = [starts[k] for k in sorted(starts)]
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return statistics.median(gaps) if len(gaps) >= MIN_GAPS else DEFAULT_SLOT_S


def carried(
    spec: JobSpec, records: Sequence[TrialRecord], taken_over: Iterable[tuple[int, str | None]], now: float
) -> int:
    """How many taken-over recurrences count as an earlier trigger's night.

    Args:
        spec: The job's spec.
        records: The history.
        taken_over: (recurrence, when it started, ISO 8601) of each recurrence this trigger takes over; a
            recurrence given twice counts once, from its earliest start.
        now: This trigger's time (Unix time, unit: s).
    """
    first: dict[int, float | None] = {}
    for recurrence, started in taken_over:
        t = iso_seconds(started)
        was = first.get(recurrence)
        first[recurrence] = t if was is None else (was if t is None else min(was, t))
    if not first:
        return 0
    half = slot_s(spec, records) / 2
    return sum(1 for t in first.values() if t is not None and now - t >= half)
