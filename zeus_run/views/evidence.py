"""What every saving of one history rests on, and the rule that says what is compared.

* `Evidence`: each (batch size, power limit)'s converged runs outside slow recurrences, without a
  first run's sweep; the default's runs as it would have run them; and their `Spread`;
* `history_savings`: the whole history's cost, energy and time savings, each night adding to
  each side what `zeus_run.views.nights` (the one accounting of a life) says, with the interval of
  `zeus_run.views.saving`; `without_slow`: the same nights less the slow ones;
* `compared_recurrences`, `unattributed`, `only_default`: pieces of that rule other views name.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from zeus_run.views.baseline import Baseline, default_samples
from zeus_run.views.nights import Kind, Night, charges, sides
from zeus_run.views.pace import Borrowed, borrowed
from zeus_run.views.saving import Group, Saved, rate, whole_history

if TYPE_CHECKING:
    from zeus_run.objective import Objective
    from zeus_run.records import PowerLimitMeasurement, TrialRecord
    from zeus_run.views.recommend import Recommendation
    from zeus_run.views.summary import RecurrenceRow

#: The stage of a control run of the default (`zeus_run.engine.control.STAGE`).
CONTROL_STAGE = "control"
#: Quantities a run's spread is measured on (carbon and money take energy's).
QUANTITIES = ("cost", "energy", "time")

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Spread:
    """Run-to-run spread of a converged run, on the log scale.

    A group is one batch size at one power limit. Each group with two runs or more estimates
    the variance of ``log`` of one run about its group's mean; the spread is the root of the
    larger of two poolings: their plain average, each group weighing the same (the batch size a
    job settled on runs most, and its runs may vary less than the default's, so it must not speak
    for all of them), and their average weighted by degrees of freedom (a few runs that needed the
    same whole epochs show no variance at all, so they must not outvote a group that shows it).

    The default's runs carry one more term, ``rounding``: a run ends at a whole epoch, so where a
    batch size's mean lies between two whole epoch counts one run needs one or the other, half an
    epoch either way at most: ``1 / (2 x e)`` of the cost of a run that needed ``e`` epochs (the
    largest standard deviation of a choice between two counts). Other batch sizes may need other
    epoch counts, or happen to need the same ones every time; the default's mean is known no
    better than its own epochs.

    Attributes:
        cost: Standard deviation of ``log(cost)`` of one run.
        energy: The same of energy.
        time: The same of time.
        df: Degrees of freedom of ``cost``: runs minus groups, over the groups with two runs or
            more (0: unknown, no interval).
        df_energy: Those of ``energy`` and ``time`` (a first run's sweep blurs its energy and time,
            not its cost: such runs count in ``cost`` alone).
        rounding: Relative standard deviation of rounding b0's runs to whole epochs (0: epochs unknown).
    """

    cost: float = 0.0
    energy: float = 0.0
    time: float = 0.0
    df: int = 0
    df_energy: int = 0
    rounding: float = 0.0

    def of(self, quantity: str) -> float:
        """The spread of ``quantity`` for a batch size (carbon and money: energy's)."""
        return getattr(self, quantity if quantity in QUANTITIES else "energy")

    def of_default(self, quantity: str) -> float:
        """The spread of one of b0's runs: `of` with b0's `rounding`."""
        return math.hypot(self.of(quantity), self.rounding)

    def df_of(self, quantity: str) -> int:
        """Degrees of freedom of ``quantity``'s spread."""
        return self.df if quantity == "cost" else self.df_energy


@dataclass(frozen=True)
class Run:
    """One converged run as a spread sees it.

    Attributes:
        values: ``(cost, energy, time)``, without a first run's sweep.
        epochs: Epochs it needed (0: unknown).
        swept: Whether it swept the power limits (its energy and time are reconstructed).
    """

    values: tuple[float, float, float]
    epochs: int = 0
    swept: bool = False


def spread(groups: Iterable[Sequence[Run]], default: Sequence[Run] = ()) -> Spread:
    """The spread of ``groups`` of runs, and the rounding of the ``default``'s (`Spread`).

    Runs with a non-positive value are left out (no logarithm).
    """
    usable = [[r for r in g if min(r.values) > 0] for g in groups]
    sds: list[float] = []
    dfs: list[int] = []
    for k in range(3):
        variances, squares, df = [], [], 0
        for g in usable:
            rows = [r for r in g if k == 0 or not r.swept]
            if len(rows) < 2:
                continue
            logs = [math.log(r.values[k]) for r in rows]
            m = sum(logs) / len(logs)
            squares.append(sum((v - m) ** 2 for v in logs))
            variances.append(squares[-1] / (len(rows) - 1))
            df += len(rows) - 1
        equal = sum(variances) / len(variances) if variances else 0.0
        weighted = sum(squares) / df if df else 0.0
        sds.append(math.sqrt(max(equal, weighted)))
        dfs.append(df)
    epochs = [r.epochs for r in default if r.epochs > 0]
    rounding = math.sqrt(sum(1.0 / (4.0 * e * e) for e in epochs) / len(epochs)) if epochs else 0.0
    return Spread(sds[0], sds[1], sds[2], dfs[0], dfs[1], rounding)


def grouped(rows: Iterable[tuple[K, Run]]) -> dict[K, list[Run]]:
    """``(group, run)`` pairs as lists per group, in first-seen order."""
    out: dict[K, list[Run]] = defaultdict(list)
    for key, run in rows:
        out[key].append(run)
    return dict(out)


#: A group's key: ``(batch size, power limit)`` (limit None where none was set).
Key = tuple[int, "float | None"]


@dataclass(frozen=True)
class Evidence:
    """What every saving of one history rests on.

    Attributes:
        default_batch_size: b0.
        groups: Each (batch size, limit)'s converged runs outside slow recurrences, without a first
            run's sweep (`zeus_run.views.baseline.clean`): ``(cost, energy, time)``.
        default: b0's runs as the default would have run them (`zeus_run.views.baseline.default_samples`).
        spread: The pooled spread of ``groups``.
        pace: What the other batch sizes' runs say about the default's pace (`zeus_run.views.pace`; None: its
            own runs alone).
    """

    default_batch_size: int | None
    groups: Mapping[Key, Sequence[Run]]
    default: Sequence[tuple[float, float, float]]
    spread: Spread
    pace: Borrowed | None = None

    @classmethod
    def of(
        cls,
        records: Sequence[TrialRecord],
        default_batch_size: int | None,
        *,
        objective: Objective | None = None,
        profile: Sequence[PowerLimitMeasurement] = (),
        slow: Collection[int] = (),
    ) -> Evidence:
        from zeus_run.views.baseline import clean, default_runs, default_samples

        b0, limit, _, samples = default_samples(
            records, default_batch_size, objective=objective, profile=profile, slow=slow
        )
        rows = [
            ((r.batch_size, r.power_limit), Run(clean(r), r.epochs, bool(r.profile_overhead)))
            for r in records
            if r.reached and r.observed and r.stop_reason.observed and r.recurrence not in slow
        ]
        groups = grouped(rows)
        of_default = [run for (bs, _), runs in groups.items() if bs == b0 for run in runs]
        sp = spread(groups.values(), of_default)
        own = [Run(v, r.epochs) for v, r in zip(samples, default_runs(records, b0, slow), strict=True)]
        pace = borrowed(groups, b0, limit, own, (sp.cost, sp.energy, sp.time), sp.rounding) if b0 is not None else None
        return cls(b0, groups, samples, sp, pace)

    def default_mean(self, quantity: str) -> float | None:
        """The default's mean of ``quantity`` (``cost``, ``energy``, ``time``), None before b0 converged."""
        if not self.default:
            return None
        k = QUANTITIES.index(quantity)
        mean = sum(s[k] for s in self.default) / len(self.default)
        return mean * math.exp(self.pace.shift[k]) if self.pace is not None else mean

    def default_se(self, quantity: str) -> float:
        """Standard error of ``log`` of the default's mean: ``s0 / sqrt(n0)``, or with the borrowed pace
        (`zeus_run.views.pace`) its epochs' share over ``n0`` and its pace weighed with the line's."""
        if self.pace is not None:
            return math.sqrt(self.pace.variance[QUANTITIES.index(quantity if quantity in QUANTITIES else "energy")])
        return self.spread.of_default(quantity) / math.sqrt(max(len(self.default), 1))

    def group(self, key: Key, quantity: str) -> Group | None:
        """``key``'s mean of ``quantity`` over its runs (None: none converged)."""
        runs = self.groups.get(key)
        if not runs:
            return None
        k = QUANTITIES.index(quantity)
        if k > 0:  # energy and time: a sweep blurs them, so the runs without one where there are any
            runs = [r for r in runs if not r.swept] or runs
        mean = sum(r.values[k] for r in runs) / len(runs)
        return Group(key[0], mean, len(runs), key[0] == self.default_batch_size, key[1])

    def whole(
        self, quantity: str, spent: float, certain: float, expected: float, same: bool = False, extra: float = 0.0
    ) -> Saved | None:
        """The whole history's saving of ``quantity`` (`whole_history`); ``expected``: the default's part, estimated.

        ``same``: only b0 ran, at the default limit: the default's cost over these recurrences is what they
        spent, so the saving is 0, its interval the noise of b0's mean.
        """
        if not self.default or self.default_batch_size is None:
            return None
        if same:
            spent = certain + expected
        return whole_history(
            spent,
            certain,
            expected,
            self.spread.of_default(quantity),
            len(self.default),
            self.spread.df_of(quantity),
            self.default_batch_size,
            same,
            0.0 if same else extra,
            se=self.default_se(quantity),
        )

    def rate(self, keys: Sequence[Key], quantity: str) -> Saved | None:
        """The saving of a recurrence at the groups ``keys`` name (one per recurrence; groups never converged skipped)."""
        mean = self.default_mean(quantity)
        if mean is None or self.default_batch_size is None:
            return None
        counts: dict[Group, int] = {}
        for key in keys:
            g = self.group(key, quantity)
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        total = sum(counts.values())
        if not total:
            return None
        weights = {g: n / total for g, n in counts.items()}
        s, s0, df = self.spread.of(quantity), self.spread.of_default(quantity), self.spread.df_of(quantity)
        return rate(weights, mean, len(self.default), s, s0, df, self.default_batch_size)


def totals(records: Sequence[TrialRecord]) -> dict[str, float]:
    """What every try spent: cost (a skipped try: nothing), energy (unit: J) and time (unit: s)."""
    return {
        "cost": sum(r.spent_cost for r in records),
        "energy": sum(r.energy for r in records),
        "time": sum(r.time for r in records),
    }


def compared_recurrences(records: Sequence[TrialRecord], default_batch_size: int | None = None) -> list[int]:
    """The recurrences the default would have run: those a batch size reached the target in (`zeus_run.views.nights`)."""
    b0 = default_batch_size if default_batch_size is not None else (records[0].batch_size if records else None)
    return [n.recurrence for n in charges(records, b0) if n.compared]


def unattributed(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Tries no batch size caused (environment, spec, infrastructure errors, interruptions): on both sides."""
    return [r for r in records if not r.stop_reason.observed]


def only_default(records: Sequence[TrialRecord], base: Baseline | None) -> bool:
    """Whether every try a batch size ran was b0's, at the default limit: nothing differs from the default."""
    if base is None:
        return False
    ran = [r for r in records if r.stop_reason.observed]
    return bool(ran) and all(
        r.batch_size == base.batch_size and (r.power_limit is None or r.power_limit == base.power_limit) for r in ran
    )


def history_savings(
    records: Sequence[TrialRecord],
    evidence: Evidence,
    base: Baseline | None,
    slow: Collection[int] = (),
    nights: Sequence[Night] | None = None,
) -> dict[str, Saved | None]:
    """Cost, energy and time saved over ``nights`` (default: all of ``records``'): the sides of `zeus_run.views.nights`.

    ``slow``: the recurrences left out of every mean (the usual pace a slowdown is measured against
    is taken outside them).
    """
    if base is None:
        return {}
    if nights is None:
        nights = charges(records, base.batch_size, slow, base.cost)
    ran = [r for n in nights for r in n.records]
    same = only_default(ran, base)
    out: dict[str, Saved | None] = {}
    for q in QUANTITIES:
        side = sides(nights, q)
        mean = getattr(base, q)
        out[q] = evidence.whole(q, side.spent, side.certain, mean * side.runs, same, mean * (side.most - side.runs))
    return out


def without_slow(nights: Sequence[Night], slow: Collection[int]) -> list[Night]:
    """``nights`` without the slow ones (those in ``slow``, and those the evidence charged a slowdown)."""
    return [n for n in nights if n.recurrence not in slow and n.kind is not Kind.SLOW]


def with_interval(rec: Recommendation | None, evidence: Evidence) -> Recommendation | None:
    """``rec`` with its saving from its (batch size, limit)'s converged runs, and that saving's interval."""
    if rec is None:
        return None
    key = (rec.batch_size, rec.power_limit)
    saved, group = evidence.rate([key], "cost"), evidence.group(key, "cost")
    if saved is None or group is None:
        return rec
    return dataclasses.replace(
        rec, mean_cost=saved.spent, runs=group.runs, savings=saved.value, savings_ci=saved.ci, saved=saved
    )


def window_mean(recent: Sequence[RecurrenceRow], evidence: Evidence | None) -> float:
    """The window's expected cost from its groups' means, or (none converged outside slow recurrences) its own."""
    groups = [evidence.group((row.final_batch_size, row.power_limit), "cost") for row in recent] if evidence else []
    means = [g.mean for g in groups if g is not None]
    return sum(means) / len(means) if means else sum(row.cost for row in recent) / len(recent)


def baseline_of(
    records: Sequence[TrialRecord],
    default_batch_size: int | None,
    objective: Objective | None,
    profile: Sequence[PowerLimitMeasurement],
    slow: Collection[int],
    evidence: Evidence,
) -> Baseline | None:
    """The `Baseline` of ``evidence``'s default runs (None before b0 converged outside slow recurrences)."""
    b0, limit, moved, samples = default_samples(
        records, default_batch_size, objective=objective, profile=profile, slow=slow
    )
    if not samples or b0 is None:
        return None
    cost, energy, time = (evidence.default_mean(q) or 0.0 for q in QUANTITIES)
    from zeus_run.views.baseline import default_runs

    controls = sum(1 for r in default_runs(records, b0, slow) if r.stage == CONTROL_STAGE)
    pace = evidence.pace
    return Baseline(
        b0,
        limit,
        len(samples),
        moved,
        cost,
        energy,
        time,
        controls=controls,
        pace_from=pace.batch_sizes if pace is not None and pace.weight[0] > 0 else (),
        pace_weight=pace.weight[0] if pace is not None else 0.0,
    )


def default_of(saved: Saved | None) -> float | None:
    return saved.default if saved is not None else None


def value_of(saved: Saved | None) -> float | None:
    return saved.value if saved is not None else None
