"""The one estimator of "saved against the default", and its 90% interval.

Every saving zeus-run states (``history``, ``run``'s summary, the report, the exports,
``simulate``) comes from here, so each is a claim its data supports: a figure, its 90%
interval, and, where the interval holds 0, "no measurable difference yet" with the runs that
would tell.

**Whole history.** What the job really spent (every try of every recurrence: energy really
spent always counts) against what always running the default would be expected to cost over
the same recurrences (`zeus_run.views.baseline`: b0 at the default power limit):

* what each night adds to each side is `zeus_run.views.nights` (the one accounting of a life):
  a recurrence that reached the target would have run the default once (times the machine's
  slowdown where two batch sizes or more show one); a night with no model adds no default run;
* a try the optimizer does not observe (an environment, spec or infrastructure error, an
  interruption) is no batch size's doing: what it spent counts on both sides.

The spent figure is known; the default's is an estimate from b0's converged runs, so the
interval is that estimate's: ``log(mean)`` has standard error ``s0 / sqrt(n0)``, where n0 is the
number of b0's runs and ``s0`` how much one of them varies on the log scale: the spread of a
converged run about its batch size's mean, averaged over every batch size and limit that converged
more than once (pooled so that neither one batch size nor a few identical runs speak for all), plus
the rounding of b0's runs to whole epochs (`zeus_run.views.evidence.Spread`); the quantile is
Student's t with the pooled degrees of freedom. Before any batch size has converged twice the
spread is unknown and no interval is stated. Its calibration: docs/savings.md.

**Steady state and the recommendation** are rates: what a recurrence costs from now on at the
batch sizes (and limits) the last recurrences converged with, each at its mean over its
converged runs, against the default's mean. Both means are estimates, so the interval has both
uncertainties (delta method on the log ratio; a batch size's runs that are b0's own count on
both sides, so a job that runs only its default is told exactly no difference).

Carbon and money are energy charged at a rate (`zeus_run.accounting`): their intervals are
energy's, over the same recurrences.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zeus_run.views._student import t_quantile

#: Coverage of every interval stated.
LEVEL = 0.90
#: Most extra runs a hint names; beyond it the difference is too small to tell soon.
MOST_RUNS = 100


@dataclass(frozen=True)
class Hint:
    """What would tell: ``runs`` more converged runs of ``batch_size`` (None: the difference is too small)."""

    batch_size: int
    runs: int | None


@dataclass(frozen=True)
class Saved:
    """One saving against the default, with its 90% interval.

    Attributes:
        spent: What the job spent (whole history), or a recurrence's expected cost (a rate), in the
            quantity's unit.
        default: What the default would have spent over the same recurrences (or its mean).
        low: Lower end of the 90% interval of the saving (fraction), None where it cannot be bounded.
        high: Upper end, None where it cannot be bounded.
        hint: Where the interval holds 0: the runs that would tell.
        same: The comparison is of the default with itself (only b0 ran): no difference by construction.
        default_low: Whole history: the low end of the default's 90% range (None: a rate, or unbounded).
        default_high: Its high end. The saving's interval is ``1 - spent / default_low`` to
            ``1 - spent / default_high``.
        se: Standard error of ``log`` of the default's estimated part (0: none).
        df: Degrees of freedom of ``se``.
        expected: The default's estimated part (the rest, ``default - expected``, is known).
        extra: What the default's side may hold beyond ``expected`` (the interval's upper end only).
    """

    spent: float
    default: float
    low: float | None
    high: float | None
    hint: Hint | None = None
    same: bool = False
    default_low: float | None = None
    default_high: float | None = None
    se: float = 0.0
    df: int = 0
    expected: float = 0.0
    extra: float = 0.0

    @property
    def value(self) -> float:
        """``1 - spent / default`` (fraction; negative: more than the default)."""
        return _zero(1.0 - self.spent / self.default)

    @property
    def measurable(self) -> bool:
        """Whether the interval leaves 0 out: a saving (or a loss) the data supports."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    @property
    def ci(self) -> tuple[float, float] | None:
        """``(low, high)``, None where the interval is unbounded."""
        return None if self.low is None or self.high is None else (self.low, self.high)

    def to_json(self) -> dict[str, object]:
        return {
            "value": self.value,
            "ci": list(self.ci) if self.ci else None,
            "measurable": self.measurable,
            "spent": self.spent,
            "default": self.default,
            "default_range": None if self.default_low is None else [self.default_low, self.default_high],
            "only_default": self.same,
            "hint": None if self.hint is None else {"batch_size": self.hint.batch_size, "runs": self.hint.runs},
        }


def _zero(v: float) -> float:
    """``v``, with a rounding residue (below 1e-12) as exactly 0: "0.0% more" is no loss."""
    return 0.0 if abs(v) < 1e-12 else v


def quantile(df: int) -> float:
    """The two-sided `LEVEL` t quantile for ``df`` degrees of freedom."""
    return t_quantile(0.5 + LEVEL / 2.0, df)


def whole_history(
    spent: float,
    certain: float,
    expected: float,
    spread_of: float,
    runs: int,
    df: int,
    default_batch_size: int,
    same: bool = False,
    extra: float = 0.0,
    se: float | None = None,
) -> Saved | None:
    """The whole history's saving: ``1 - spent / (certain + expected)``, with its interval.

    Args:
        spent: What every try cost (the quantity's unit).
        certain: What the tries no batch size caused spent: on both sides, known.
        expected: What the default would be expected to cost over the recurrences compared (its mean
            times their slowdowns, charged at their rates): the estimate.
        spread_of: Spread of one of b0's runs (`zeus_run.views.evidence.Spread.of_default`; log scale).
        runs: b0's converged runs the default's mean rests on.
        df: The spread's degrees of freedom.
        default_batch_size: b0 (named by the hint).
        same: Only b0 ran (the comparison is of the default with itself).
        extra: What the default's side may hold beyond ``expected`` where the evidence allows more
            (a slow try of one batch size: the machine may have been slow, `zeus_run.views.nights`);
            it widens the interval's upper end only.
        se: Standard error of ``log(expected)`` where it is not ``spread_of / sqrt(runs)`` (the default's pace also
            read from other batch sizes: `zeus_run.views.pace`).

    Returns:
        None without a positive default to compare with.
    """
    default = certain + expected
    if default <= 0 or runs <= 0 or not math.isfinite(spent):
        return None
    if se is None:
        se = spread_of / math.sqrt(runs)
    if df <= 0:
        return Saved(spent, default, None, None, None, same, expected=expected)
    half = quantile(df) * se
    d_low, d_high = certain + expected * math.exp(-half), certain + (expected + extra) * math.exp(half)
    low, high = _zero(1.0 - spent / d_low), _zero(1.0 - spent / d_high)
    hint = None
    if not (low > 0 or high < 0) and not same:
        gap = abs(math.log(spent - certain) - math.log(expected)) if spent > certain else 0.0
        hint = Hint(default_batch_size, _more(gap, spread_of, runs, df))
    return Saved(spent, default, low, high, hint, same, d_low, d_high, se, df, expected, extra)


def pooled(items: Sequence[Saved | None]) -> Saved | None:
    """Several jobs' whole-history savings as one: ``1 - sum(spent) / sum(default)``, with its interval.

    The defaults' estimates are independent: the variance of their sum is the sum of
    ``(expected x se)^2``; the quantile takes the fewest degrees of freedom among them.
    None when none of ``items`` has a default; no interval when one of them has none.
    """
    known = [x for x in items if x is not None]
    if not known:
        return None
    spent, default = sum(x.spent for x in known), sum(x.default for x in known)
    expected = sum(x.expected for x in known)
    if default <= 0:
        return None
    bounded = all(x.ci is not None for x in known) and expected > 0
    if not bounded:
        return Saved(spent, default, None, None)
    se = math.sqrt(sum((x.expected * x.se) ** 2 for x in known)) / expected
    df = min(x.df for x in known)
    half = quantile(df) * se
    certain, extra = default - expected, sum(x.extra for x in known)
    d_low, d_high = certain + expected * math.exp(-half), certain + (expected + extra) * math.exp(half)
    low, high = _zero(1.0 - spent / d_low), _zero(1.0 - spent / d_high)
    return Saved(spent, default, low, high, None, all(x.same for x in known), d_low, d_high, se, df, expected, extra)


def _more(gap: float, s: float, runs: int, df: int) -> int | None:
    """Extra runs of one mean (resting on ``runs`` now) after which ``gap`` would clear the interval."""
    if gap <= 0 or s <= 0:
        return None
    need = math.ceil((quantile(df) * s / gap) ** 2) - runs
    need = max(need, 1)
    return need if need <= MOST_RUNS else None


@dataclass(frozen=True)
class Group:
    """One batch size at one power limit: the mean of its converged runs.

    Attributes:
        batch_size: The batch size.
        mean: Mean of the quantity over its converged runs (unit: the quantity's).
        runs: How many.
        of_default: Its runs are among those the default's mean rests on (b0's).
        power_limit: Its power limit (unit: W), None where none was set.
    """

    batch_size: int
    mean: float
    runs: int
    of_default: bool = False
    power_limit: float | None = None


def rate(
    weights: Mapping[Group, float],
    default_mean: float,
    default_runs: int,
    spread_of: float,
    default_spread: float,
    df: int,
    default_batch_size: int,
) -> Saved | None:
    """The saving of a recurrence at the batch sizes in ``weights`` (shares summing to 1) against the default's mean.

    ``log(sum(w m)) - log(m0)`` by the delta method: each group's log mean has variance
    ``s^2 / n`` (``s0`` for b0's groups: `zeus_run.views.evidence.Spread.of_default`), and b0's runs count in both means
    (covariance ``s0^2 / n0`` for each of b0's groups), so a job that runs b0 alone has none.
    """
    if default_mean <= 0 or default_runs <= 0 or not weights:
        return None
    mean = sum(w * g.mean for g, w in weights.items())
    if mean <= 0:
        return None
    same = all(g.of_default for g in weights) and mean == default_mean
    if df <= 0:
        if same:
            return Saved(mean, default_mean, 0.0, 0.0, None, True)
        return Saved(mean, default_mean, None, None)

    s2, s02 = spread_of**2, default_spread**2

    def variance(extra: Group | None = None, k: int = 0) -> float:
        n0 = default_runs + (k if extra is not None and extra.of_default else 0)
        v = s02 / n0
        for g, w in weights.items():
            a = w * g.mean / mean
            n = g.runs + (k if g == extra else 0)
            v += a * a * (s02 if g.of_default else s2) / n
            if g.of_default:
                v -= 2.0 * a * s02 / n0
        return max(v, 0.0)

    se = math.sqrt(variance())
    half = quantile(df) * se
    gap = math.log(mean) - math.log(default_mean)
    low, high = _zero(1.0 - math.exp(gap + half)), _zero(1.0 - math.exp(gap - half))
    saved = Saved(mean, default_mean, low, high, None, same, se=se, df=df)
    if saved.measurable or same:
        return saved
    best: Hint | None = None
    for g in weights:

        def more_of(k: int, g: Group = g) -> float:
            return variance(g, k)

        k = _runs_to_tell(more_of, abs(gap), df)
        if k is not None and (best is None or best.runs is None or k < best.runs):
            best = Hint(g.batch_size, k)
    if best is None:
        k = _runs_to_tell(lambda k: _default_only(variance, k), abs(gap), df)
        best = Hint(default_batch_size, k)
    return Saved(mean, default_mean, low, high, best, same, se=se, df=df)


def _default_only(variance: Callable[[Group | None, int], float], k: int) -> float:
    return variance(Group(-1, 1.0, 1, True), k)


def _runs_to_tell(variance: Callable[[int], float], gap: float, df: int) -> int | None:
    if gap <= 0:
        return None
    t = quantile(df)
    for k in range(1, MOST_RUNS + 1):
        if t * math.sqrt(variance(k)) < gap:
            return k
    return None


def words(saved: Saved | None, amount: Callable[[float], str] | None = None, per: str = "") -> str:
    """A saving as every view words it, with the figures it is computed from when ``amount`` is given.

    ``12.3 MJ against the default's 14.0 MJ (90%: 13.2 to 14.9 MJ): 12.4% saved (90% interval 6.8% to 17.4%)``;
    ``3.0% more (90% interval 0.5% to 5.6% more)``; ``no measurable difference yet (1.6% saved; 90% interval
    4.2% more to 7.5% saved; about 12 more converged runs of batch size 256 would tell)``; ``no measurable
    difference: only the default batch size ran``; ``-`` when there is no default to compare with.

    Args:
        saved: The saving.
        amount: Formats a figure of the quantity (``1.4 MJ``); None: the percentages alone.
        per: Said after each figure (`` per recurrence``).
    """
    if saved is None:
        return "-"
    head = ""
    if amount is not None:
        rng = ""
        if saved.default_low is not None and saved.default_high is not None and not saved.same:
            rng = f" (90%: {amount(saved.default_low)} to {amount(saved.default_high)})"
        head = f"{amount(saved.spent)}{per} against the default's {amount(saved.default)}{per}{rng}: "
    if saved.same:
        return head + "no measurable difference: only the default batch size ran, at its default limit"
    if saved.measurable:
        return head + f"{pct(saved.value)} (90% interval {_interval(saved)})"
    if saved.ci is None:
        inside = "no interval yet: how much a run varies is unknown until a batch size has converged twice"
    else:
        inside = f"90% interval {_interval(saved)}"
    return head + f"no measurable difference yet ({pct(saved.value)}; {inside}{_tell(saved.hint)})"


def short(saved: Saved | None) -> str:
    """A saving in a few words for a title or a table cell.

    ``12.4% saved (6.8-17.4%)``, ``3.0% more (0.5-5.6%)``, and where the interval holds 0
    ``no measurable difference (-2.1% to +4.0%)`` (signed: + saved, - more).
    """
    if saved is None:
        return "-"
    if saved.same:
        return "no measurable difference (only the default ran)"
    lo, hi = saved.low, saved.high
    if lo is None or hi is None:
        return "no measurable difference (no interval yet)"
    if not saved.measurable:
        return f"no measurable difference ({lo * 100:+.1f}% to {hi * 100:+.1f}%)"
    if saved.value >= 0:
        return f"{pct(saved.value)} ({lo * 100:.1f}-{hi * 100:.1f}%)"
    return f"{pct(saved.value)} ({-hi * 100:.1f}-{-lo * 100:.1f}%)"


def pct(v: float) -> str:
    """``12.4% saved`` or ``3.0% more`` (a rounding residue of 0 reads ``0.0% saved``)."""
    v = _zero(v)
    return f"{v * 100:.1f}% saved" if v >= 0 else f"{-v * 100:.1f}% more"


def _interval(saved: Saved) -> str:
    if saved.low is None or saved.high is None:
        return "unknown"
    lo, hi = (0.0 if abs(v) < 0.0005 else v for v in (saved.low, saved.high))  # no "0.0% more" for -0.0004
    if lo >= 0:
        return f"{lo * 100:.1f}% to {hi * 100:.1f}%"
    if hi <= 0:
        return f"{-hi * 100:.1f}% to {-lo * 100:.1f}% more"
    return f"{-lo * 100:.1f}% more to {hi * 100:.1f}% saved"


def _tell(hint: Hint | None) -> str:
    if hint is None:
        return ""
    if hint.runs is None:
        return f"; too small a difference to tell within {MOST_RUNS} more runs"
    runs = "1 more converged run" if hint.runs == 1 else f"about {hint.runs} more converged runs"
    return f"; {runs} of batch size {hint.batch_size} would tell"


@dataclass(frozen=True)
class Calibration:
    """How intervals fared where the truth is known (simulations: `scripts/bench_optimizer.py`).

    Attributes:
        runs: Runs judged.
        covered: Share of runs whose interval holds the true saving (an unbounded one holds anything).
        median_width: Median width of the bounded intervals (fraction; NaN: none).
        false_claims: Runs whose interval claims a saving (its low end above 0) where the truth is a
            loss of more than `LOSS_TOLERANCE`.
        worst: The lowest true saving among the runs that claimed a saving (None: none claimed one).
        measurable: Share of runs whose interval leaves 0 out.
    """

    runs: int
    covered: float
    median_width: float
    false_claims: int
    worst: float | None
    measurable: float

    def line(self, quantity: str = "cost") -> str:
        """One line for a benchmark's output (``quantity``: what the saving is of)."""
        worst = "none claimed" if self.worst is None else f"{self.worst * 100:+.1f}%"
        return (
            f"90% interval of the {quantity} saving: holds the true saving in {self.covered * 100:.1f}% of {self.runs} "
            f"runs, median width {self.median_width * 100:.1f} pt, measurable in {self.measurable * 100:.1f}%; "
            f"claims a saving where the truth is a loss of more than {LOSS_TOLERANCE * 100:.0f} point: "
            f"{self.false_claims} (lowest true saving among the claims: {worst})"
        )


#: A loss this small (fraction) is not counted against an interval that claims a saving.
LOSS_TOLERANCE = 0.01


def calibrate(pairs: Iterable[tuple[float, tuple[float, float] | None]]) -> Calibration:
    """`Calibration` of ``(true saving, interval or None)`` pairs."""
    rows = list(pairs)
    if not rows:
        return Calibration(0, math.nan, math.nan, 0, None, math.nan)
    widths = sorted(ci[1] - ci[0] for _, ci in rows if ci is not None)
    covered = sum(1 for t, ci in rows if ci is None or ci[0] <= t <= ci[1])
    claims = [t for t, ci in rows if ci is not None and ci[0] > 0]
    mid = len(widths) // 2
    median = (widths[mid] if len(widths) % 2 else (widths[mid - 1] + widths[mid]) / 2) if widths else math.nan
    return Calibration(
        runs=len(rows),
        covered=covered / len(rows),
        median_width=median,
        false_claims=sum(1 for t in claims if t < -LOSS_TOLERANCE),
        worst=min(claims) if claims else None,
        measurable=sum(1 for _, ci in rows if ci is not None and (ci[0] > 0 or ci[1] < 0)) / len(rows),
    )


def saved_json(saved: Mapping[str, Saved | None]) -> dict[str, dict[str, Any]]:
    """``saved`` (each quantity's figure, a fraction) and ``saved_ci`` (its 90% interval, ``[low, high]``)."""
    return {
        "saved": {q: v.value if v is not None else None for q, v in saved.items()},
        "saved_ci": {q: list(v.ci) if v is not None and v.ci is not None else None for q, v in saved.items()},
    }
