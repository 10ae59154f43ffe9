"""The accounting of a life: what each night adds to each side of "saved against the default".

This is the one place that says it; every view that states a whole history's saving (``history``
text, JSON and CSV, ``run``'s summary, the report, the plots, the exports, carbon and money,
``simulate``) takes its sides from `charges` (docs/savings.md, "What each night adds").

zeus-run's side is always what every try really spent. The default's side, night by night:

* **reached** (a try reached the target): the default's mean once, plus what the tries no batch
  size caused spent (an environment, spec or infrastructure error, an interruption: the default
  would have met them too);
* **slow** (reached, and the machine ran slow): the default's mean times the night's slowdown,
  but only in proportion to evidence that the machine, not a batch size, was slow: two batch
  sizes or more ran their epochs slower than their usual pace that night (`MACHINE_EVIDENCE`),
  and the default is charged the smallest of their slowdowns. One slow try of one batch size is
  no such evidence: the default is charged its usual mean, and zeus-run pays the slow try; the
  interval's upper end allows the default that slowdown (the machine may have been slow);
* **failed** (a batch size ran, none reached the target: the night produced no model): no
  default run (a night without a model earns nothing against the default); where the default batch
  size ran that night, the default met that failure as it ran, as many times as the night tried
  (its job retries as zeus-run's does), at its own tries' mean, at most what the night spent; with the
  tries no batch size caused. A failed night never raises a saving;
* **lost** (no batch size ran: every try was an environment, spec or infrastructure error, or
  interrupted): what it spent, on both sides;
* **estimated** energy (no GPU measured) counts like measured energy on both sides; the views
  say the figures are estimates.

A night's kind is a pure function of its records and of the pace the history knows
(`machine_slowdown`), so every view of one history computes the same sides.
"""

from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeus_run.contract import StopReason
from zeus_run.engine.classify import out_of_memory

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord

#: A try whose epochs ran this many times slower than its batch size's usual pace ran slow
#: (the optimizer's threshold: `zeus_run.optimizer.early_stop.SLOWDOWN`).
SLOW_PACE = 1.3
#: Distinct batch sizes that must have run slow in one night before the default is charged a slowdown.
MACHINE_EVIDENCE = 2


class Kind(str, enum.Enum):
    """What kind of night a recurrence was (see the module's docstring)."""

    REACHED = "reached"
    SLOW = "slow"
    FAILED = "failed"
    LOST = "lost"


@dataclass(frozen=True)
class Night:
    """One recurrence as the comparison with the default sees it.

    Attributes:
        recurrence: Its number.
        kind: `Kind`.
        records: Every try of the night (all on zeus-run's side).
        both: The tries counted on the default's side too, as they ran.
        own: On a failed night, the default batch size's own tries (`held` takes them as many times as
            the night tried).
        default_runs: How many of the default's mean runs the default's side gets (0 or 1, or the
            machine's slowdown where the evidence shows one).
        slowdown: The machine's slowdown the evidence supports (1.0: none).
        most: The most default runs the evidence allows (``default_runs`` times the slowest try's
            slowdown where one try ran slow: the interval's upper end reaches it).
    """

    recurrence: int
    kind: Kind
    records: tuple[TrialRecord, ...]
    both: tuple[TrialRecord, ...]
    default_runs: float
    slowdown: float = 1.0
    most: float = 0.0
    own: tuple[TrialRecord, ...] = ()

    def __post_init__(self) -> None:
        if self.most < self.default_runs:
            object.__setattr__(self, "most", self.default_runs)

    def held(self, value: Callable[[TrialRecord], float]) -> float:
        """What the default's side holds of this night as it ran, ``value`` of each try summed (its runs aside).

        The tries in `both`; on a failed night the default batch size's own tries, at their mean, as many
        times as the night's tries a batch size ran, and at most what those spent (so it never raises a saving).
        """
        out = sum(value(r) for r in self.both)
        if self.own:
            both = {id(r) for r in self.both}
            ran = [value(r) for r in self.records if r.stop_reason.observed and id(r) not in both]
            out += min(sum(value(r) for r in self.own) / len(self.own) * len(ran), sum(ran))
        return out

    @property
    def compared(self) -> bool:
        """Whether the default would have run this night (a batch size ran and reached the target)."""
        return self.default_runs > 0


def at_boundary(record: TrialRecord) -> bool:
    """Whether a try ended at an epoch boundary: it reached, or was judged at an epoch's end (``max_epochs``,
    ``no_progress``). A crash, a timeout, an interruption or a cost-threshold cut may end part-way through an
    epoch: their cost holds a partial epoch their count does not."""
    return record.reached or record.stop_reason in (StopReason.MAX_EPOCHS, StopReason.NO_PROGRESS)


def pace_of(record: TrialRecord) -> float | None:
    """Cost per epoch of a try whose epochs were timed and that ended at an epoch boundary (None: no pace).

    A try that ended part-way through an epoch (`at_boundary`) has none: its cost over its whole epochs would
    read a partial epoch as slowness.
    """
    if record.epochs <= 0 or not record.epochs_timed or not (record.cost > 0 and math.isfinite(record.cost)):
        return None
    if not at_boundary(record):
        return None
    return record.cost / record.epochs


def usual_pace(records: Iterable[TrialRecord], slow: Collection[int] = ()) -> dict[int, float]:
    """Each batch size's median cost per epoch over its converged tries outside ``slow`` recurrences."""
    seen: dict[int, list[float]] = defaultdict(list)
    for r in records:
        p = pace_of(r)
        if p is not None and r.reached and r.observed and r.recurrence not in slow:
            seen[r.batch_size].append(p)
    return {bs: _median(v) for bs, v in seen.items()}


def machine_slowdown(
    night: Sequence[TrialRecord], usual: Mapping[int, float], default_cost: float | None = None
) -> tuple[float, float]:
    """The slowdown of the machine one night's tries give evidence of, and the most they allow (1.0: none).

    Each batch size that ran that night with a known usual pace gives its *fastest* try (`_slowness`: one that
    ended at an epoch boundary gives its pace; one cut part-way through an epoch gives only the least pace it
    shows, and only where even that is slow): its ratio to the usual pace, and what it cost beyond it. Where at least `MACHINE_EVIDENCE` batch sizes ran and all ran slower than
    `SLOW_PACE`, the machine ran slow by at least the smallest of their ratios, or, as a stall that adds the same
    to every try, by the smallest of their excesses: the default (``default_cost``, its mean run) is charged the
    lesser. Fewer batch sizes, or one at its usual pace: 1.0; the most is the largest ratio above `SLOW_PACE`
    (the machine may have been that slow).
    """
    ratios: dict[int, float] = {}
    excess: dict[int, float] = {}
    for r in night:
        u = usual.get(r.batch_size)
        read = _slowness(r, u) if u and r.stop_reason.observed else None
        if read is None or (r.batch_size in ratios and ratios[r.batch_size] <= read[0]):
            continue
        ratios[r.batch_size], excess[r.batch_size] = read
    most = max([v for v in ratios.values() if v >= SLOW_PACE], default=1.0)
    if len(ratios) < MACHINE_EVIDENCE or min(ratios.values()) < SLOW_PACE:
        return 1.0, most
    factor = min(ratios.values())
    if default_cost:
        factor = max(1.0, min(factor, 1.0 + min(excess.values()) / default_cost))
    return factor, max(most, factor)


def _slowness(record: TrialRecord, usual: float) -> tuple[float, float] | None:
    """``(ratio to the usual pace, cost beyond it)`` a try shows, None where it shows nothing.

    A try that ended at an epoch boundary shows its pace (`pace_of`). One cut part-way through an epoch (a crash, a
    cost-threshold cut) shows at least ``cost / (epochs + 1)``: evidence of slowness where even that is slow
    (`SLOW_PACE`), of nothing otherwise (a crash at its start says nothing about the machine's pace).
    """
    p = pace_of(record)
    if p is not None:
        return p / usual, record.cost - usual * record.epochs
    if record.reached or not record.epochs_timed or not (record.cost > 0 and math.isfinite(record.cost)):
        return None
    least = record.cost / (record.epochs + 1) / usual
    return (least, record.cost - usual * (record.epochs + 1)) if least >= SLOW_PACE else None


def hits_default(record: TrialRecord, default_batch_size: int | None) -> bool:
    """Whether a try's failure would have hit the default too, so its spend counts on both sides.

    An environment error or a node the cluster lost (`StopReason.INFRASTRUCTURE`) would have; so would an
    out-of-memory crash at or below the default batch size (the default needs at least that memory). A failure
    of a batch size the default does not use, a spec error (zeus-run's own spec), and a launcher killed under
    a trial (`StopReason.INTERRUPTED`: zeus-run's process, not the job's) would not.
    """
    reason = record.stop_reason
    if reason in (StopReason.ENVIRONMENT_ERROR, StopReason.INFRASTRUCTURE):
        return True
    if not reason.observed:
        return False
    return default_batch_size is not None and record.batch_size <= default_batch_size and out_of_memory_try(record)


def out_of_memory_try(record: TrialRecord) -> bool:
    """Whether ``record`` is a crash out of memory (its ``oom`` mark, or its cause or output says so)."""
    return bool(record.oom) or out_of_memory(record)


def charges(
    records: Sequence[TrialRecord],
    default_batch_size: int | None,
    slow: Collection[int] = (),
    default_cost: float | None = None,
) -> list[Night]:
    """Each recurrence of ``records`` as a `Night`, in order.

    Args:
        records: The history.
        default_batch_size: b0 (its own tries on a failed night count on both sides).
        slow: Recurrences left out of every mean (the usual pace is taken outside them).
        default_cost: The default's mean run cost (unit: J), where known: a slowdown is charged to it
            as the lesser of a ratio and a stall (`machine_slowdown`).
    """
    by_night: dict[int, list[TrialRecord]] = defaultdict(list)
    for r in records:
        by_night[r.recurrence].append(r)
    usual = usual_pace(records, slow)
    out = []
    for n in sorted(by_night):
        rs = by_night[n]
        ran = [r for r in rs if r.stop_reason.observed]
        others = tuple(r for r in rs if hits_default(r, default_batch_size))
        if not ran:
            out.append(Night(n, Kind.LOST, tuple(rs), others, 0.0))
        elif not any(r.reached for r in rs):
            own = tuple(r for r in ran if r.batch_size == default_batch_size and r not in others)
            out.append(Night(n, Kind.FAILED, tuple(rs), others, 0.0, own=own))
        else:
            factor, most = machine_slowdown(rs, usual, default_cost)
            kind = Kind.SLOW if factor > 1.0 else Kind.REACHED
            out.append(Night(n, kind, tuple(rs), others, factor, factor, most))
    return out


@dataclass(frozen=True)
class Sides:
    """One quantity's two sides over some nights.

    Attributes:
        spent: What every try spent (zeus-run's side).
        certain: What the default's side holds as it ran (tries counted on both sides).
        runs: Default runs the default's side holds (the multiplier of its mean).
        most: The most default runs the evidence allows (the interval's upper end).
    """

    spent: float
    certain: float
    runs: float
    most: float = 0.0


def _quantity(record: TrialRecord, quantity: str) -> float:
    if quantity == "cost":
        return record.spent_cost
    return float(getattr(record, quantity))


def sides(nights: Iterable[Night], quantity: str) -> Sides:
    """``quantity``'s (``cost``, ``energy``, ``time``) `Sides` over ``nights``."""
    spent = certain = runs = most = 0.0
    for night in nights:
        spent += sum(_quantity(r, quantity) for r in night.records)
        certain += night.held(lambda r: _quantity(r, quantity))
        runs += night.default_runs
        most += night.most
    return Sides(spent, certain, runs, most)


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2.0
