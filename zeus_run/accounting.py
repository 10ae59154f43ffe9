"""Carbon and money: what a run's joules mean, from the ``accounting`` spec section.

```yaml
accounting: {carbon_g_per_kwh: 350, price_per_kwh: 0.12, currency: USD}
accounting: {carbon_g_per_kwh: grid.csv, price_per_kwh: 0.12}   # a CSV time series: timestamp,value
```

A number is a constant rate; a string is a CSV file of ``timestamp,value`` rows (ISO-8601
timestamps, naive ones read as UTC, or Unix seconds; an optional header row). A trial is
charged at the rate in force when it started (the last row at or before its start; the first
row before the series begins). Records without a start time (simulated runs) are charged at
the series' mean. Nothing here touches the network: for live carbon intensity, write the CSV
from your provider's data.

The saving against the default follows the one rule of every saving (`zeus_run.views.saving`):
every try is charged as it ran, at the rate in force when it started; each recurrence a batch
size ran in would have cost the default's energy (the default batch size at the default power
limit; times the slowdown of a slow recurrence), charged at the rate in force when that
recurrence started; a try no batch size caused counts on both sides. Its 90% interval is the
energy saving's. Carbon is in grams of CO2e (unit: gCO2e), shown with a prefix
(`zeus_run._units.carbon`).

A changed section on resume (a new carbon intensity or price) applies from the recurrence where
it appears, with a notice, and the run directory keeps each period's rates
(`zeus_run.rundir.rates`); a changed currency is refused (one history, one currency).
"""

from __future__ import annotations

import bisect
import csv
import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run import _units
from zeus_run.errors import UsageError

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord
    from zeus_run.views.saving import Saved
    from zeus_run.views.summary import Summary

#: Joules in a kilowatt-hour.
J_PER_KWH = 3.6e6
#: Most rows a rate series may hold.
MAX_ROWS = 1_000_000


class AccountingError(UsageError):
    """A rate series cannot be read (the message names the file, the line and the fix)."""


@dataclass(frozen=True)
class AccountingSettings:
    """The ``accounting`` spec section.

    Attributes:
        carbon_g_per_kwh: Carbon intensity (unit: gCO2e/kWh), a CSV path of it, or None.
        price_per_kwh: Price of energy (unit: currency/kWh), a CSV path of it, or None.
        currency: The price's currency code (text shown next to amounts).
    """

    carbon_g_per_kwh: float | str | None = None
    price_per_kwh: float | str | None = None
    currency: str = "USD"

    @property
    def enabled(self) -> bool:
        """Whether any rate is set."""
        return self.carbon_g_per_kwh is not None or self.price_per_kwh is not None


@dataclass(frozen=True)
class Rate:
    """A constant rate, or a step series of (time, value) sorted by time (unit: per kWh)."""

    times: tuple[float, ...]
    values: tuple[float, ...]

    @classmethod
    def of(cls, value: float | str, base: Path | None = None) -> Rate:
        """A constant, or the series in the CSV at ``value`` (relative to ``base``)."""
        if isinstance(value, str):
            return read_series(Path(value) if base is None else base / value, shown=value)
        return cls((), (float(value),))

    def at(self, started_at: str | None) -> float:
        """The rate in force at ISO time ``started_at`` (None: the mean of the series)."""
        if not self.times:
            return self.values[0]
        if started_at is None:
            return sum(self.values) / len(self.values)
        i = bisect.bisect_right(self.times, _seconds(started_at)) - 1
        return self.values[max(i, 0)]


def read_series(path: Path, shown: str | None = None) -> Rate:
    """A ``timestamp,value`` CSV as a `Rate`.

    Args:
        path: The CSV.
        shown: How errors name it (default: ``path``); the spec's own value, relative to the job.

    NOTE: an error names the file and the line number, never the line's content: a spec may point at
    a file that is no CSV (a server client's spec, say), and no line of it must reach the screen.

    Raises:
        AccountingError: Missing, unreadable or malformed (naming the line).
    """
    name = repr(str(path) if shown is None else shown)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except OSError as exc:
        raise AccountingError(
            f"Cannot read the rate series {name}: {exc.strerror or type(exc).__name__}. Write a CSV of "
            "timestamp,value rows."
        ) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise AccountingError(
            f"The rate series {name} is not a CSV of UTF-8 text ({type(exc).__name__}). Write a CSV of "
            "timestamp,value rows."
        ) from None
    points: list[tuple[float, float]] = []
    for n, row in enumerate(rows[:MAX_ROWS], start=1):
        if not row or not "".join(row).strip():
            continue
        why = f"{len(row)} columns, not 2"
        try:
            if len(row) != 2:
                raise ValueError(why)
            why = "the first column is not an ISO-8601 time or a number of seconds"
            t = _seconds(row[0])
            why = "the second column is not a non-negative number"
            v = float(row[1])
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(why)
        except ValueError:
            if n == 1 and not _is_time(row[0]):
                continue  # a header row
            raise AccountingError(
                f"The rate series {name}, line {n}: not a timestamp,value row ({why}); write e.g. "
                "2026-01-01T00:00:00Z,350"
            ) from None
        points.append((t, v))
    if not points:
        raise AccountingError(
            f"The rate series {name} has no timestamp,value rows; write e.g. 2026-01-01T00:00:00Z,350"
        )
    points.sort()
    return Rate(tuple(p[0] for p in points), tuple(p[1] for p in points))


def _is_time(text: str) -> bool:
    try:
        _seconds(text)
    except ValueError:
        return False
    return True


def _seconds(text: str) -> float:
    """Unix seconds of an ISO-8601 time (naive: UTC) or of a number of seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    stamp = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return stamp.timestamp()


@dataclass(frozen=True)
class Period:
    """The rates in force from one recurrence on (a changed ``accounting`` section on resume starts a new one).

    Attributes:
        first: First recurrence charged at these rates.
        settings: The ``accounting`` section from then on.
    """

    first: int
    settings: AccountingSettings


@dataclass(frozen=True)
class Accounting:
    """A run's carbon and money, and the same for always running the default.

    Attributes:
        currency: Currency code of the money figures.
        carbon_g: Total of every trial (unit: gCO2e), or None without a carbon rate.
        money: Total of every trial (unit: ``currency``), or None without a price.
        carbon: The whole history's carbon saving against the default (`zeus_run.views.saving.Saved`:
            what every try emitted against what the default would have, its interval), None without a
            rate or a baseline.
        money_saved: The same in money.
        steady: The steady state's energy saving, which is its carbon and money saving too (a rate
            charges a recurrence and the default's alike), None without a steady state.
        periods: The rates and the recurrence each applied from (one period unless the section changed
            on resume: `zeus_run.rundir.rates`).
    """

    currency: str
    carbon_g: float | None
    money: float | None
    carbon: Saved | None = None
    money_saved: Saved | None = None
    steady: Saved | None = None
    periods: tuple[Period, ...] = ()

    @property
    def default_carbon_g(self) -> float | None:
        """What the default would have emitted over the same recurrences (unit: gCO2e)."""
        return self.carbon.default if self.carbon is not None else None

    @property
    def default_money(self) -> float | None:
        """What the default would have cost in money over the same recurrences."""
        return self.money_saved.default if self.money_saved is not None else None

    @property
    def carbon_saving(self) -> float | None:
        """``1 - carbon_g / default_carbon_g``."""
        return self.carbon.value if self.carbon is not None else None

    @property
    def money_saving(self) -> float | None:
        """``1 - money / default_money``."""
        return self.money_saved.value if self.money_saved is not None else None

    def to_json(self) -> dict[str, Any]:
        """Totals, and each saving with its 90% interval beside it (``*_ci``: ``[low, high]``, fractions)."""
        steady = self.steady
        return {
            "currency": self.currency,
            "carbon_g": self.carbon_g,
            "money": self.money,
            "default_carbon_g": self.default_carbon_g,
            "default_money": self.default_money,
            "carbon_saving": self.carbon_saving,
            "carbon_saving_ci": _ci(self.carbon),
            "money_saving": self.money_saving,
            "money_saving_ci": _ci(self.money_saved),
            "steady_carbon_saving": steady.value if steady is not None and self.carbon_g is not None else None,
            "steady_carbon_saving_ci": _ci(steady) if self.carbon_g is not None else None,
            "steady_money_saving": steady.value if steady is not None and self.money is not None else None,
            "steady_money_saving_ci": _ci(steady) if self.money is not None else None,
            "saved": {
                "carbon": self.carbon.to_json() if self.carbon is not None else None,
                "money": self.money_saved.to_json() if self.money_saved is not None else None,
            },
            "periods": [
                {
                    "from_recurrence": p.first,
                    "carbon_g_per_kwh": p.settings.carbon_g_per_kwh,
                    "price_per_kwh": p.settings.price_per_kwh,
                    "currency": p.settings.currency,
                }
                for p in self.periods
            ],
        }

    def lines(self) -> list[str]:
        """Plain-text lines for the summary (no markup): each total against the default's, with its interval."""
        from zeus_run.views.saving import words

        out = []
        for name, total, saved, fmt in (
            ("Carbon", self.carbon_g, self.carbon, _units.carbon),
            ("Money", self.money, self.money_saved, lambda v: _units.money(v, self.currency)),
        ):
            if total is None:
                continue
            out.append(f"{name}: {words(saved, fmt)}" if saved is not None else f"{name}: {fmt(total)}")
        if len(self.periods) > 1:
            out.append("Rates: " + "; ".join(_period_text(p) for p in self.periods))
        return out

    def subtitle(self) -> str:
        """One short line for a plot's title: totals, and the saving against the default where known."""
        from zeus_run.views.saving import short

        parts = []
        for total, saved, fmt in (
            (self.carbon_g, self.carbon, _units.carbon),
            (self.money, self.money_saved, lambda v: _units.money(v, self.currency)),
        ):
            if total is not None:
                parts.append(fmt(total) + (f" ({short(saved)} against the default)" if saved is not None else ""))
        return "; ".join(parts)


def _ci(saved: Saved | None) -> list[float] | None:
    return list(saved.ci) if saved is not None and saved.ci is not None else None


def _period_text(p: Period) -> str:
    def shown(v: float | str) -> str:
        return repr(v) if isinstance(v, str) else f"{v:g}"

    parts = []
    if p.settings.carbon_g_per_kwh is not None:
        parts.append(f"carbon {shown(p.settings.carbon_g_per_kwh)} g/kWh")
    if p.settings.price_per_kwh is not None:
        parts.append(f"price {shown(p.settings.price_per_kwh)} {p.settings.currency}/kWh")
    return f"from recurrence {p.first}: " + (", ".join(parts) or "none")


def account(
    records: Sequence[TrialRecord],
    settings: AccountingSettings,
    summary: Summary | None = None,
    base: Path | None = None,
    periods: Sequence[Period] = (),
) -> Accounting | None:
    """Carbon and money of ``records`` under ``settings`` (None when no period sets a rate).

    Args:
        records: The history.
        settings: The ``accounting`` section (of every recurrence, unless ``periods`` says otherwise).
        summary: The records' summary (`zeus_run.views.summary.summarize`): the default, the
            recurrences compared, the slow ones and the spread the intervals rest on. None: totals only.
        base: Folder that relative CSV paths start at.
        periods: The rates by the recurrence they applied from (`zeus_run.rundir.rates.periods`);
            empty: ``settings`` throughout.

    Raises:
        AccountingError: A rate series cannot be read.
    """
    periods = tuple(sorted(periods, key=lambda p: p.first)) or (Period(1, settings),)
    if not any(p.settings.enabled for p in periods):
        return None
    carbon = [(p.first, _rate(p.settings.carbon_g_per_kwh, base)) for p in periods]
    price = [(p.first, _rate(p.settings.price_per_kwh, base)) for p in periods]
    currency = periods[-1].settings.currency
    starts: dict[int, str | None] = {}
    for r in records:
        starts.setdefault(r.recurrence, r.started_at)

    def total(rates: list[tuple[int, Rate | None]]) -> float | None:
        if all(rate is None for _, rate in rates):
            return None
        return sum(r.energy / J_PER_KWH * _at(rates, r.recurrence, r.started_at) for r in records)

    def saved(rates: list[tuple[int, Rate | None]], spent: float | None) -> Saved | None:
        if spent is None or summary is None or summary.baseline is None:
            return None
        from zeus_run.views import saving as est
        from zeus_run.views.summary import compared_recurrences, unattributed

        energy = summary.saved.get("energy")
        b0 = summary.baseline
        certain = sum(r.energy / J_PER_KWH * _at(rates, r.recurrence, r.started_at) for r in unattributed(records))
        expected = sum(
            summary.slow.get(n, 1.0) * b0.energy / J_PER_KWH * _at(rates, n, starts.get(n))
            for n in compared_recurrences(records)
        )
        spread = summary.spread
        return est.whole_history(
            spent,
            certain,
            expected,
            spread.of_default("energy"),
            b0.runs,
            spread.df_of("energy"),
            b0.batch_size,
            energy.same if energy is not None else False,
        )

    carbon_g, money = total(carbon), total(price)
    steady = summary.steady.saved.get("energy") if summary is not None and summary.steady is not None else None
    return Accounting(
        currency,
        carbon_g,
        money,
        saved(carbon, carbon_g),
        saved(price, money),
        steady,
        periods if len(periods) > 1 else (),
    )


def _rate(value: float | str | None, base: Path | None) -> Rate | None:
    return Rate.of(value, base) if value is not None else None


def _at(rates: Sequence[tuple[int, Rate | None]], recurrence: int, started_at: str | None) -> float:
    """The rate in force for ``recurrence`` (its period's), at ``started_at``; 0 where that period sets none."""
    rate = None
    for first, r in rates:
        if first <= recurrence:
            rate = r
    if rate is None and rates and recurrence < rates[0][0]:
        rate = rates[0][1]
    return rate.at(started_at) if rate is not None else 0.0


def settings_from(raw: Mapping[str, Any] | None) -> AccountingSettings:
    """The settings stored in a run directory's ``spec.yaml`` (absent or damaged: none)."""
    if not isinstance(raw, Mapping):
        return AccountingSettings()
    fields: dict[str, Any] = {}
    for key in ("carbon_g_per_kwh", "price_per_kwh"):
        value = raw.get(key)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            fields[key] = value
    if isinstance(raw.get("currency"), str):
        fields["currency"] = raw["currency"]
    return AccountingSettings(**fields)
